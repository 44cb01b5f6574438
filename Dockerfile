# syntax=docker/dockerfile:1
#
# The trial image of the remote executors (Vertex AI, Kubernetes, SageMaker): `hptune`, whose
# `hptune relay` is the command of every trial job, and `hptune-trainer` built with CUDA. It
# also serves a model (`serve`: hptune-trainer serve, the model in /opt/ml/model) on Vertex
# AI and SageMaker endpoints: SageMaker runs the image with the argument `serve`.
#
#   scripts/fetch-model.sh                       # optional: bakes models/ into the image
#   docker build -t REGISTRY/hptune:TAG .
#   docker push REGISTRY/hptune:TAG
#
# Build stage: NVIDIA's devel image (CUDA headers and libraries for burn-cuda) plus Rust.
ARG CUDA_VERSION=12.4.1
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04 AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl build-essential pkg-config \
 && rm -rf /var/lib/apt/lists/*
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:$PATH
# The workspace's rust-version.
RUN curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
  | sh -s -- -y --profile minimal --default-toolchain 1.90.0
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p hptune --bin hptune \
 && cargo build --release --locked -p hptune-trainer --features cuda \
 && mkdir -p models

# Run stage: the CUDA runtime (cudart, NVRTC, cuBLAS), OpenBLAS for `--device cpu` trials (the
# trainer opens it at run time), and the two binaries, as a plain user.
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu22.04
RUN apt-get update \
 && apt-get install -y --no-install-recommends libopenblas0-pthread \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/hptune /src/target/release/hptune-trainer /usr/local/bin/
COPY --from=build /src/models /opt/hptune/models
COPY --from=build /src/samples /opt/hptune/samples
# `serve`, as SageMaker runs a serving image, is hptune-trainer's server (port 8080, or
# AIP_HTTP_PORT / SAGEMAKER_BIND_TO_PORT; the model in /opt/ml/model unless --model-dir).
RUN printf '#!/bin/sh\nexec hptune-trainer serve "$@"\n' > /usr/local/bin/serve \
 && chmod 755 /usr/local/bin/serve
EXPOSE 8080
RUN useradd --create-home --uid 1000 hptune
USER hptune
WORKDIR /home/hptune
CMD ["hptune", "--help"]
