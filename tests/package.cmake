# package_deb (label `package`): packaging/check-deb.sh builds kvscope-cli (and kvscope), runs
# cpack into <build>/package-test and checks the .deb's contents list, control fields
# (Depends from dpkg-shlibdeps naming libtorch and Qt 6), desktop entry and AppStream metainfo
# (validated), RPATHs, and that the packaged kvscope-cli finds the packaged demo model.
# Included by tests/CMakeLists.txt; the CPack configuration is cmake/KvscopePackaging.cmake.
if(KVSCOPE_BUILD_GUI)
  set(_kvscope_pkg_gui ON)
else()
  set(_kvscope_pkg_gui OFF)
endif()
add_test(NAME package_deb
         COMMAND bash ${PROJECT_SOURCE_DIR}/packaging/check-deb.sh
                 --source-dir ${PROJECT_SOURCE_DIR}
                 --build-dir ${PROJECT_BINARY_DIR}
                 --version ${PROJECT_VERSION}
                 --gui ${_kvscope_pkg_gui}
                 --cpack ${CMAKE_CPACK_COMMAND}
                 --cmake ${CMAKE_COMMAND})
# RUN_SERIAL: cpack compresses tens of MB and the check runs the CLI; keep it off the other
# suites' cores.
set_tests_properties(package_deb PROPERTIES LABELS package TIMEOUT 900 RUN_SERIAL ON)
