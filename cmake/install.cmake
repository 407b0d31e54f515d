# Install rules so that C++ users can find_package(octopt CONFIG). In a wheel everything goes
# below the Python package, where octopt.cmake_dir() points.
include(CMakePackageConfigHelpers)
if(DEFINED SKBUILD)
  set(_octopt_root "octopt/")
else()
  include(GNUInstallDirs)
  set(_octopt_root "")
endif()
set(_octopt_libdir "${_octopt_root}lib")
set(_octopt_cmakedir "${_octopt_root}share/cmake/octopt")

# octopt_c (octopt::c): the C ABI's shared library; in a wheel it lies where octopt.c_library() looks.
install(TARGETS octopt octopt_c EXPORT octoptTargets
  ARCHIVE DESTINATION ${_octopt_libdir}
  LIBRARY DESTINATION ${_octopt_libdir}
  RUNTIME DESTINATION ${_octopt_libdir})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/cpp/include/octopt DESTINATION ${OCTOPT_INSTALL_INCLUDEDIR})
install(EXPORT octoptTargets NAMESPACE octopt:: DESTINATION ${_octopt_cmakedir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/octoptConfig.cmake.in
  ${PROJECT_BINARY_DIR}/octoptConfig.cmake INSTALL_DESTINATION ${_octopt_cmakedir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/octoptConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/octoptConfig.cmake ${PROJECT_BINARY_DIR}/octoptConfigVersion.cmake
  DESTINATION ${_octopt_cmakedir})
