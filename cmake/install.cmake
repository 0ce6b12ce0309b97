# Installation: header, both libraries, kvtool, kvbench, a pkg-config file
# and a CMake package exporting kvflash::kvflash and kvflash::kvflash_static.
include(CMakePackageConfigHelpers)

install(TARGETS kvflash_shared kvflash_static EXPORT kvflashTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kvtool kvbench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT kvflashTargets NAMESPACE kvflash::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvflash)

configure_package_config_file(cmake/kvflash-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/kvflash-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvflash)
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/kvflash-config-version.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kvflash-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/kvflash-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvflash)

# the .pc finds its prefix relative to itself, so any --prefix works
file(RELATIVE_PATH KVF_PC_UP ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
configure_file(cmake/kvflash.pc.in ${CMAKE_CURRENT_BINARY_DIR}/kvflash.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kvflash.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
