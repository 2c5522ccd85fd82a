# Debian packages with CPack, one per install component (cmake/install.cmake):
#   gradagg-server  the server (and the command line tool)   Depends: from dpkg-shlibdeps
#   libgradagg0     the shared C SDK                          Depends: from dpkg-shlibdeps
#   libgradagg-dev  headers, libgradagg.so/.a, gradagg.pc, the CMake package
#                   Depends: libgradagg0 (= version) and the -dev packages a static link needs
# Built from a Release build configured for the /usr prefix:
#   cmake -S . -B build/deb -G Ninja -DCMAKE_INSTALL_PREFIX=/usr -DGA_BUILD_TESTS=OFF -DGA_BUILD_BENCH=OFF
#   ninja -C build/deb && (cd build/deb && cpack -G DEB)    -> build/deb/packages/*.deb
# A CUDA build (GA_WITH_CUDA=ON) makes the same packages; its static libgradagg.a then also needs
# the CUDA toolkit's cudart_static to link (not a Debian package, so not in Depends).
# Installed with `apt install ./gradagg-server_*.deb` (the image does: Dockerfile);
# scripts/check-container installs all three in a bare Debian 12 and builds programs against them.
set(CPACK_PACKAGE_NAME gradagg)
set(CPACK_PACKAGE_VENDOR gradagg)
set(CPACK_PACKAGE_CONTACT "gradagg developers <gradagg@example.invalid>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "gradient aggregation service for data-parallel training")
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL server runtime dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)

set(CPACK_DEBIAN_SERVER_PACKAGE_NAME gradagg-server)
set(CPACK_DEBIAN_SERVER_PACKAGE_SECTION net)
set(CPACK_COMPONENT_SERVER_DESCRIPTION
    "gradagg-server: gRPC service that aggregates compressed gradients\n"
    " Accepts compressed gradient pushes from training workers, aggregates them each step,\n"
    " applies the optimizer and serves the merged parameters.")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libgradagg0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "gradagg C SDK (shared library)\n"
    " The worker side of gradagg: compresses, pushes and pulls gradients and parameters.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libgradagg-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libgradagg0 (= ${PROJECT_VERSION}), libgrpc-dev, libprotobuf-c-dev, libssl-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "gradagg C SDK (development files)\n"
    " Header, shared and static library, gradagg.pc and the CMake package gradagg.")

include(CPack)
