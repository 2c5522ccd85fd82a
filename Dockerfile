# gradagg-server image: a builder stage compiles the server and the SDK's example worker, a slim
# runtime stage holds the binaries, the shared libraries they link (found from the binaries,
# nothing else) and a non-root user.
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
# The build packages of scripts/bootstrap without the test, fuzzing and script tools it also installs.
RUN export DEBIAN_FRONTEND=noninteractive \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends \
         build-essential cmake ninja-build pkg-config \
         libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libuv1-dev libhttp-parser-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cuda_flags="-DGA_WITH_CUDA=OFF"; \
    if [ "$CUDA" = on ]; then \
      [ -x /usr/local/cuda/bin/nvcc ] || { echo "CUDA=on needs CUDA_BASE, an image with /usr/local/cuda/bin/nvcc" >&2; exit 1; }; \
      cuda_flags="-DGA_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES"; \
    elif [ "$CUDA" != off ]; then echo "CUDA must be off or on, not '$CUDA'" >&2; exit 1; fi; \
    cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_BUILD_TESTS=OFF -DGA_BUILD_BENCH=OFF \
          $cuda_flags \
    && ninja -C /build gradagg-server softmax_train \
    && install -D -m 0755 -s /build/service/gradagg-server /out/usr/local/bin/gradagg-server \
    && install -D -m 0755 -s /build/client/softmax_train /out/usr/local/bin/softmax_train
# The runtime packages are the ones owning the libraries the binaries link, so the list follows the
# distribution (Debian 12 libgrpc29, Ubuntu 24.04 libgrpc29t64, ...). dpkg records /lib paths under
# either prefix (merged /usr), so both are tried.
RUN set -e; ldd /out/usr/local/bin/gradagg-server /out/usr/local/bin/softmax_train \
      | awk '/=> \// { print $3 }' | sort -u > /tmp/libs; \
    : > /tmp/packages; \
    while read -r lib; do \
      alt=$(echo "$lib" | sed -e 's|^/usr/lib/|/lib/|;t' -e 's|^/lib/|/usr/lib/|'); \
      owner=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$alt" 2>/dev/null || true); \
      [ -n "$owner" ] || { echo "no package owns $lib" >&2; exit 1; }; \
      echo "$owner" | head -n 1 | cut -d: -f1 >> /tmp/packages; \
    done < /tmp/libs; \
    sort -u /tmp/packages > /out/runtime-packages; \
    echo "runtime packages:" $(cat /out/runtime-packages)

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
COPY --from=builder /out/runtime-packages /tmp/runtime-packages
# Shared libraries only (no -dev, no compiler); ldd proves every one resolves. The user is written
# into /etc/passwd directly: minimal bases have no useradd. Fixed ids so Kubernetes'
# runAsNonRoot and volume ownership (fsGroup) can rely on them.
RUN export DEBIAN_FRONTEND=noninteractive \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends ca-certificates $(cat /tmp/runtime-packages) \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /tmp/runtime-packages \
    && echo 'gradagg:x:10001:10001:gradagg:/var/lib/gradagg:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'gradagg:x:10001:' >> /etc/group \
    && mkdir -p /var/lib/gradagg \
    && chown 10001:10001 /var/lib/gradagg \
    && chmod 0750 /var/lib/gradagg
# The server, and the SDK's example worker (client/examples/softmax_train.c) that
# deploy/examples/training-job.yaml runs.
COPY --from=builder /out/usr/local/bin/gradagg-server /out/usr/local/bin/softmax_train /usr/local/bin/
RUN if ldd /usr/local/bin/gradagg-server /usr/local/bin/softmax_train | grep 'not found'; then exit 1; fi \
    && /usr/local/bin/gradagg-server --help > /dev/null
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
