# Warnings and sanitizer flags shared by kvscope's own targets.
add_library(kvscope_compile_options INTERFACE)
add_library(kvscope::compile_options ALIAS kvscope_compile_options)
target_compile_options(kvscope_compile_options INTERFACE
  $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wno-unused-parameter>)
if(KVSCOPE_ASAN)
  target_compile_options(kvscope_compile_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer)
  target_link_options(kvscope_compile_options INTERFACE -fsanitize=address,undefined)
endif()
