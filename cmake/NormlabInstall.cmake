# Installs the library, its headers, the CLI and the CMake package normlab::normlab.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(NORMLAB_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/normlab)
install(TARGETS normlab EXPORT normlab-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/normlab DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/normlab/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/normlab)
if(NORMLAB_BUILD_TOOLS)
  install(TARGETS normlab-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(PROGRAMS ${PROJECT_SOURCE_DIR}/tools/plot_sweep.py ${PROJECT_SOURCE_DIR}/tools/plot_diagnostics.py
          ${PROJECT_SOURCE_DIR}/tools/olmo_checkpoint.py
          DESTINATION ${CMAKE_INSTALL_DATADIR}/normlab)
  # lm-evaluation-harness tasks over the KJV task files (docs/interop.md; --include_path)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/tools/lm_eval DESTINATION ${CMAKE_INSTALL_DATADIR}/normlab)
endif()
install(EXPORT normlab-targets NAMESPACE normlab:: DESTINATION ${NORMLAB_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/normlab-config.cmake.in
  ${PROJECT_BINARY_DIR}/normlab-config.cmake INSTALL_DESTINATION ${NORMLAB_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/normlab-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/normlab-config.cmake
              ${PROJECT_BINARY_DIR}/normlab-config-version.cmake
        DESTINATION ${NORMLAB_INSTALL_CMAKEDIR})
