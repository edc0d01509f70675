# The Debian package (cpack -G DEB, or `cmake --build <dir> --target package`): kvscope and
# kvscope-cli in /usr/bin, the bundled demo model in /usr/share/kvscope/demo-model (where the
# installed binaries look for it, relative to their own location), and the desktop
# integration (a .desktop entry, the icon, AppStream metainfo). Runtime library dependencies
# come from dpkg-shlibdeps. Included last from the top-level CMakeLists.txt, after every
# target's install() rule. tests/package.cmake builds the package and checks its contents.

include(GNUInstallDirs)

set(_kvscope_resources ${PROJECT_SOURCE_DIR}/resources)
set(KVSCOPE_APP_ID org.kvscope.kvscope)

# The demo model (a Hugging Face folder). Rules are written whether or not the folder exists
# yet, and OPTIONAL makes its absence no error, so the package picks it up as soon as it
# appears without a reconfigure. Only the files of a Hugging Face model folder are taken
# (not the test's sample.txt), never the trainer's checkpoint state (kvscope-cli train
# --checkpoint-dir writes optimizer moments, f32 weights and trainer_state.json). Keep these
# patterns in step with packaging/check-deb.sh.
install(DIRECTORY ${_kvscope_resources}/demo-model/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/kvscope/demo-model
        OPTIONAL
        FILES_MATCHING
        PATTERN "*.json"
        PATTERN "*.safetensors"
        PATTERN "README*"
        PATTERN "LICENSE*"
        PATTERN "COPYING*"
        PATTERN "optimizer.safetensors" EXCLUDE
        PATTERN "weights_f32.safetensors" EXCLUDE
        PATTERN "trainer_state.json" EXCLUDE)

# The licence, where Debian keeps it (kvscope is GPL-3.0-or-later: the GUI links QCustomPlot,
# which is GPL-3).
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/kvscope
        RENAME copyright)

# Desktop integration belongs to the GUI: without kvscope there is nothing to launch.
if(TARGET kvscope)
  install(FILES ${_kvscope_resources}/${KVSCOPE_APP_ID}.desktop
          DESTINATION ${CMAKE_INSTALL_DATADIR}/applications)
  install(FILES ${_kvscope_resources}/icons/kvscope.svg
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps)
  install(FILES ${_kvscope_resources}/${KVSCOPE_APP_ID}.metainfo.xml
          DESTINATION ${CMAKE_INSTALL_DATADIR}/metainfo)
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvscope)
set(CPACK_PACKAGE_VENDOR "kvscope developers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "inspect, snapshot and restore the KV cache of a transformer")
# No double quotes in here: CPack would split the text at them.
set(CPACK_PACKAGE_DESCRIPTION
    "kvscope is RenderDoc for the KV cache: a desktop inspector for the state a
transformer language model needs to continue a generation. It loads llama2.c
checkpoints, GGUF files and Hugging Face folders, runs sessions, shows the KV
cache, token buffer, positions, mask and attention, and captures the whole
continuation state into checksummed snapshots that are verified on restore.

The package contains the Qt GUI (kvscope), the command-line tool (kvscope-cli)
and a small bundled demo model, so both work without a download.")
set(CPACK_PACKAGE_CONTACT "kvscope maintainers <maintainers@users.noreply.a-seed-471e5564.example>")
set(CPACK_STRIP_FILES ON)
# Only what install() rules put into the package: no "unspecified" component split.
set(CPACK_DEB_COMPONENT_INSTALL OFF)

# The DEB generator installs under /usr (its default CPACK_PACKAGING_INSTALL_PREFIX).
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # kvscope_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${CPACK_PACKAGE_CONTACT})
# Shared libraries (libtorch, Qt 6, QCustomPlot, zstd, ...) become versioned Depends.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Not visible to dpkg-shlibdeps: libtorch is ~25x slower on the reference BLAS it would fall
# back to, and Qt loads the SVG icon engine (for the window icon) as a plugin.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libopenblas0-openmp | libopenblas0")
if(TARGET kvscope)
  string(APPEND CPACK_DEBIAN_PACKAGE_RECOMMENDS ", libqt6svg6")
endif()
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The desktop database, icon cache and AppStream cache are refreshed by the dpkg file triggers
# of desktop-file-utils, hicolor-icon-theme and appstream: no maintainer scripts needed.

# `package_source`: the source tree as a .tar.xz, without build folders or the git store.
set(CPACK_SOURCE_GENERATOR TXZ)
set(CPACK_SOURCE_PACKAGE_FILE_NAME kvscope-${PROJECT_VERSION})
set(CPACK_SOURCE_IGNORE_FILES "/\\.git/" "/\\.cache/" "/build[^/]*/" "/out/" "\\.kvsnap\\.tmp")

include(CPack)
