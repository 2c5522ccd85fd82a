# gradagg-server image: a builder stage compiles the server's Debian package (scripts/package) and
# the SDK's example worker; a slim runtime stage installs the package with apt (which brings the
# shared libraries it depends on, nothing else) and holds the worker and a non-root user.
#
# CPU image (default), from Docker Hub's debian:bookworm-slim:
#   podman build -t gradagg:0.1.0 .
# Offline: any Debian 12 (or Ubuntu 24.04) root file system imported as an image serves as BASE;
# the stages then need only that image and an apt mirror (scripts/check-container does this):
#   debootstrap --variant=minbase bookworm rootfs http://deb.debian.org/debian
#   tar -C rootfs -c . | podman import - localhost/debian:bookworm
#   podman build --build-arg BASE=localhost/debian:bookworm -t gradagg:0.1.0 .
# CUDA image: CUDA=on, a builder image with nvcc at /usr/local/cuda (CUDA_BASE, a CUDA devel image)
# and a runtime image of the same distribution (CUDA_RUNTIME_BASE; default BASE). The CUDA runtime
# is linked statically (cudart_static), so the runtime image needs no CUDA library: the driver's
# libcuda comes from the NVIDIA container toolkit at run time. Offline, load the images first
# (podman load -i cuda-devel.tar; podman load -i cuda-base.tar), then:
#   podman build --build-arg CUDA=on --build-arg BACKEND=cuda \
#     --build-arg CUDA_BASE=nvidia/cuda:13.0.0-devel-ubuntu24.04 \
#     --build-arg CUDA_RUNTIME_BASE=nvidia/cuda:13.0.0-base-ubuntu24.04 -t gradagg:0.1.0-cuda .
#   podman run --device nvidia.com/gpu=all -p 7070:7070 -p 7071:7071 gradagg:0.1.0-cuda
# The CUDA bases replace BASE through ${CUDA_BASE:-${BASE}} rather than stages named after CUDA
# (FROM builder-${CUDA}): Debian 12's podman 4.3 does not see through an ARG in FROM when it skips
# unused stages, and would then either fail or pull the CUDA image for a CPU build.

ARG BASE=debian:bookworm-slim
ARG CUDA=off
ARG CUDA_BASE=
ARG CUDA_RUNTIME_BASE=

# ---- builder ----
FROM ${CUDA_BASE:-${BASE}} AS builder
ARG CUDA
ARG CUDA_ARCHITECTURES="80;90"
# The build packages of scripts/bootstrap without the test, fuzzing and script tools it also installs
# (file and dpkg-dev: CPack's dpkg-shlibdeps).
RUN export DEBIAN_FRONTEND=noninteractive \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends \
         build-essential cmake ninja-build pkg-config file \
         libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libuv1-dev libhttp-parser-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The Debian packages of scripts/package (cmake/package.cmake): gradagg-server's dependencies are
# what dpkg-shlibdeps finds in its binaries, so they follow the distribution (Debian 12 libgrpc29,
# Ubuntu 24.04 libgrpc29t64, ...).
RUN cuda_flags="-DGA_WITH_CUDA=OFF"; \
    if [ "$CUDA" = on ]; then \
      [ -x /usr/local/cuda/bin/nvcc ] || { echo "CUDA=on needs CUDA_BASE, an image with /usr/local/cuda/bin/nvcc" >&2; exit 1; }; \
      cuda_flags="-DGA_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES"; \
    elif [ "$CUDA" != off ]; then echo "CUDA must be off or on, not '$CUDA'" >&2; exit 1; fi; \
    scripts/package /build $cuda_flags \
    && mkdir -p /out \
    && cp /build/packages/gradagg-server_*.deb /out/gradagg-server.deb \
    && install -D -m 0755 -s /build/client/softmax_train /out/usr/local/bin/softmax_train

# ---- runtime ----
FROM ${CUDA_RUNTIME_BASE:-${BASE}} AS runtime
# cpu, or cuda for the CUDA image (the server's --backend; the CUDA build also runs the cpu backend).
ARG BACKEND=cpu
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="gradagg-server" \
      org.opencontainers.image.description="gRPC gradient aggregation service (compressed gradients, CPU or CUDA)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://example.invalid/gradagg" \
      org.opencontainers.image.licenses="NOASSERTION"
COPY --from=builder /out/gradagg-server.deb /tmp/gradagg-server.deb
# The server's package (gradagg-server and the command line tool gradagg), and with it the shared
# libraries they need (no -dev, no compiler); ldd proves every one resolves for the server and the
# example worker, which links the same ones. The user is written into /etc/passwd directly:
# minimal bases have no useradd. Fixed ids so Kubernetes' runAsNonRoot and volume ownership
# (fsGroup) can rely on them.
RUN export DEBIAN_FRONTEND=noninteractive \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends ca-certificates /tmp/gradagg-server.deb \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /tmp/gradagg-server.deb \
    && echo 'gradagg:x:10001:10001:gradagg:/var/lib/gradagg:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'gradagg:x:10001:' >> /etc/group \
    && mkdir -p /var/lib/gradagg \
    && chown 10001:10001 /var/lib/gradagg \
    && chmod 0750 /var/lib/gradagg
# The SDK's example worker (client/examples/softmax_train.c) that deploy/examples/training-job.yaml runs.
COPY --from=builder /out/usr/local/bin/softmax_train /usr/local/bin/
RUN if ldd /usr/bin/gradagg-server /usr/local/bin/softmax_train | grep 'not found'; then exit 1; fi \
    && gradagg-server --help > /dev/null
ENV GRADAGG_BACKEND=${BACKEND} \
    GRADAGG_LISTEN=0.0.0.0:7070 \
    GRADAGG_ADMIN_LISTEN=0.0.0.0:7071 \
    GRADAGG_DATA_DIR=/var/lib/gradagg \
    GRADAGG_DRAIN_DELAY_MS=2000
USER 10001:10001
WORKDIR /var/lib/gradagg
VOLUME ["/var/lib/gradagg"]
EXPOSE 7070 7071
STOPSIGNAL SIGTERM
ENTRYPOINT ["gradagg-server"]
