# syntax=docker/dockerfile:1
# Images of both Switchyard binaries (and of the mock upstream, for demos and drills), from one
# build:
#
#   docker build --target control-plane -t switchyard/control-plane:0.1.0 .
#   docker build --target data-plane    -t switchyard/data-plane:0.1.0 .
#   docker build --target mock-upstream -t switchyard/mock-upstream:0.1.0 .
#
# scripts/release prints these commands with the release's version and labels;
# deploy/compose/compose.yaml builds all three for a local fleet.
#
# Stages: `planner` reduces the workspace to a dependency recipe (cargo-chef), `builder` compiles
# the dependencies from that recipe in their own layer (kept until Cargo.toml/Cargo.lock change,
# so editing the sources rebuilds only the workspace crates), then the binaries. The data plane is
# built with the profile of its own request path, by the same script a source build uses
# (scripts/pgo: an instrumented build, a training run of chat, streams, translation, embeddings,
# limits and refusals against the mock upstream inside the build, then the optimized build), so
# the image runs the binary BENCHMARKS.md measures. That build compiles the data plane's
# dependencies twice more (its compiler flags differ from the cooked layer's): about three times
# the plain build's time. `--build-arg PGO=0` builds the data plane plain instead. The runtime
# images are distroless (glibc, CA certificates, no shell, no package manager) and run as the
# unprivileged user 65532; the Kubernetes manifests in deploy/ expect exactly that.

ARG RUST_VERSION=1.95
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM rust:${RUST_VERSION}-slim-bookworm AS chef
# make: tikv-jemalloc-sys builds jemalloc from its C sources (the slim image has gcc, not make);
# curl: the profile's training run waits for the proxy's readiness with it. Versions come with
# the pinned Debian release of the base image. llvm-tools: llvm-profdata of rustc's own LLVM,
# which merges the training run's counts.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends make curl \
    && rm -rf /var/lib/apt/lists/*
RUN rustup component add llvm-tools \
    && cargo install cargo-chef --version 0.1.78 --locked
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
# 1: the data plane built with its profile (scripts/pgo); 0: built plain.
ARG PGO=1
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
COPY --from=planner /src/recipe.json recipe.json
# The dependency layer: rebuilt only when the recipe (manifests, lock file) changes.
RUN cargo chef cook --release --locked --recipe-path recipe.json \
      -p switchyard-control-plane -p switchyard-data-plane -p switchyard-mock-upstream
COPY . .
# The measured build last: the binary scripts/pgo leaves in target/pgo replaces the plain one.
RUN cargo build --release --locked \
      -p switchyard-control-plane -p switchyard-data-plane -p switchyard-mock-upstream \
      --bin switchyard-control-plane --bin switchyard-data-plane --bin switchyard-mock-upstream \
    && mkdir -p /out \
    && cp target/release/switchyard-control-plane target/release/switchyard-data-plane \
          target/release/switchyard-mock-upstream /out/ \
    && if [ "$PGO" = 1 ]; then \
         scripts/pgo && cp target/pgo/switchyard-data-plane /out/switchyard-data-plane; \
       fi

FROM ${RUNTIME_IMAGE} AS control-plane
LABEL org.opencontainers.image.title="switchyard-control-plane" \
      org.opencontainers.image.description="Switchyard control plane: admin REST API, explain, gRPC route snapshots" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/switchyard-control-plane /usr/local/bin/switchyard-control-plane
USER 65532:65532
# The binary listens on loopback unless told otherwise; in a container the network boundary is
# the pod's, so the image listens on every interface.
ENV SWITCHYARD_HTTP_ADDR=0.0.0.0:8081 SWITCHYARD_GRPC_ADDR=0.0.0.0:8082
EXPOSE 8081 8082
ENTRYPOINT ["/usr/local/bin/switchyard-control-plane"]

# The mock upstream (shared/mock-upstream): a scriptable OpenAI/Anthropic/Gemini server that
# answers without a provider, for the local fleet (deploy/compose) and failover drills. Not for
# production traffic.
FROM ${RUNTIME_IMAGE} AS mock-upstream
LABEL org.opencontainers.image.title="switchyard-mock-upstream" \
      org.opencontainers.image.description="Switchyard mock upstream: a scriptable OpenAI/Anthropic/Gemini test server" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/switchyard-mock-upstream /usr/local/bin/switchyard-mock-upstream
USER 65532:65532
ENV MOCK_LISTEN=0.0.0.0:9000
EXPOSE 9000
ENTRYPOINT ["/usr/local/bin/switchyard-mock-upstream"]

# Last, so a plain `docker build .` gives the data plane (the image most deployments run).
FROM ${RUNTIME_IMAGE} AS data-plane
LABEL org.opencontainers.image.title="switchyard-data-plane" \
      org.opencontainers.image.description="Switchyard data plane: the OpenAI/Anthropic-compatible LLM proxy" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/switchyard-data-plane /usr/local/bin/switchyard-data-plane
USER 65532:65532
ENV SWITCHYARD_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/switchyard-data-plane"]
