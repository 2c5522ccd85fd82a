# What `cmake --install` puts in place, in three components that are also the Debian packages
# (cmake/package.cmake):
#   server   bin/gradagg-server, bin/gradagg (the command line tool)   -> gradagg-server
#   runtime  lib/libgradagg.so.0 (the C SDK)                             -> libgradagg0
#   dev      include/gradagg/*.h, lib/libgradagg.{so,a}, pkgconfig/gradagg.pc,
#            lib/cmake/gradagg/ (find_package(gradagg))                  -> libgradagg-dev
# The public headers are gradagg.h and the kernels' headers it includes; a program includes
# "gradagg.h" with -I<prefix>/include/gradagg (what gradagg.pc and gradagg::gradagg give).
# docs/install.md states how programs build against it; tests/install/ proves it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(GA_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/gradagg)
set(GA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/gradagg)
set(GA_INSTALL_PKGCONFIGDIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(TARGETS gradagg-server gradagg_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT server)
install(TARGETS gradagg_shared
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_SKIP)
install(TARGETS gradagg_shared
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev NAMELINK_ONLY)
install(TARGETS gradagg_sdk_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(FILES client/gradagg.h kernels/ga_codec.h kernels/ga_exec.h kernels/ga_optim.h kernels/ga_status.h
        DESTINATION ${GA_INSTALL_INCLUDEDIR} COMPONENT dev)

# gradagg.pc: relocatable (prefix from ${pcfiledir}); Libs.private are what a static link adds.
file(RELATIVE_PATH GA_PC_PREFIX_FROM_PCDIR "/p/${GA_INSTALL_PKGCONFIGDIR}" "/p")
string(REGEX REPLACE "/$" "" GA_PC_PREFIX_FROM_PCDIR "${GA_PC_PREFIX_FROM_PCDIR}") # ../.. or ../../..
set(GA_PC_LIBS_PRIVATE "")
foreach(lib IN LISTS OpenMP_C_LIB_NAMES)
  string(APPEND GA_PC_LIBS_PRIVATE " -l${lib}")
endforeach()
string(APPEND GA_PC_LIBS_PRIVATE " -lm")
if(GA_HAVE_CUDA)
  string(APPEND GA_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt -lstdc++")
endif()
configure_file(cmake/gradagg.pc.in ${CMAKE_BINARY_DIR}/gradagg.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/gradagg.pc DESTINATION ${GA_INSTALL_PKGCONFIGDIR} COMPONENT dev)

configure_package_config_file(cmake/gradaggConfig.cmake.in ${CMAKE_BINARY_DIR}/gradaggConfig.cmake
  INSTALL_DESTINATION ${GA_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR GA_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/gradaggConfigVersion.cmake
  COMPATIBILITY SameMinorVersion) # 0.x: a minor version may change the ABI
install(FILES ${CMAKE_BINARY_DIR}/gradaggConfig.cmake ${CMAKE_BINARY_DIR}/gradaggConfigVersion.cmake
        DESTINATION ${GA_INSTALL_CMAKEDIR} COMPONENT dev)
