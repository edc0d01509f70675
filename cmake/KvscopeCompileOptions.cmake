# Warnings and sanitizer flags shared by kvscope's own targets.
add_library(kvscope_compile_options INTERFACE)
add_library(kvscope::compile_options ALIAS kvscope_compile_options)
target_compile_options(kvscope_compile_options INTERFACE
  $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wno-unused-parameter>)
# GCC 12 (Debian 12's) warns inside libstdc++'s std::string when a literal is concatenated with
# a string (`"a" + s`): -Wrestrict and -Wstringop-overflow false positives, GCC bugs 105329 and
# 105651, fixed in GCC 13. Real overflows are the sanitizer builds' and the fuzzers' to find.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(kvscope_compile_options INTERFACE -Wno-restrict -Wno-stringop-overflow)
endif()
if(KVSCOPE_ASAN)
  target_compile_options(kvscope_compile_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer)
  target_link_options(kvscope_compile_options INTERFACE -fsanitize=address,undefined)
endif()
