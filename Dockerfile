# syntax=docker/dockerfile:1
#
# The sluice container image: a static-ish Rust binary on a distroless base.
#
#     docker build -t sluice:0.1.0 .
#     docker run --rm -p 8081:8081 -p 8080:8080 sluice:0.1.0
#
# The image serves the sample rules baked in at /etc/sluice/config (config/ in this repository);
# mount your own rules over that directory (the Helm chart mounts a ConfigMap there) or pass
# `serve --config PATH`. Every flag can also be set through its SLUICE_* environment variable.
# CI (scripts/validate-deploy.sh) lints this file with hadolint and checkov and runs the build
# stage's cargo command outside Docker, since CI has no Docker engine.

# ---- build stage ---------------------------------------------------------------------------------
# Debian 12 (bookworm) in both stages, so the binary links the glibc the runtime image ships.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src

# make: jemalloc (sluice's allocator, built from source by tikv-jemalloc-sys) needs it; the
# slim image has only gcc and libc6-dev.
RUN apt-get update \
    && apt-get install -y --no-install-recommends make=4.3-4.1 \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first: this layer is rebuilt only when Cargo.toml, Cargo.lock, build.rs or the
# protos change, not on every source edit. Stub targets let cargo compile every dependency (and
# run build.rs) without the sources.
COPY Cargo.toml Cargo.lock build.rs ./
# jemalloc's build options.
COPY .cargo ./.cargo
COPY proto ./proto
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked --bin sluice \
    && rm -rf src

COPY src ./src
COPY config ./config
# touch: the stubs above are newer than the real sources' timestamps in the build context, and
# cargo would otherwise keep the stub build. Then prove the sample config loads.
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin sluice \
    && ./target/release/sluice check config/

# ---- runtime stage -------------------------------------------------------------------------------
# distroless/cc: glibc, libgcc and CA certificates, no shell, no package manager. The :nonroot
# variant's user is 65532; it is set numerically below so Kubernetes' runAsNonRoot can verify it.
FROM gcr.io/distroless/cc-debian12:nonroot

LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.description="A rate-limit service for Envoy (Envoy RLS v3 gRPC API)" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
# Envoy Gateway runs its ratelimit container as `/bin/ratelimit` with no arguments; invoked by
# that name, sluice serves from envoyproxy/ratelimit's environment (README "Envoy Gateway").
# A copy, not a link: the runtime image has no shell to make one.
COPY --from=build /src/target/release/sluice /bin/ratelimit
COPY --from=build /src/config/ /etc/sluice/config/

USER 65532:65532
# 8081: gRPC (Envoy RLS v3 and grpc.health.v1). 8080: HTTP side port (/healthcheck, /rlconfig).
EXPOSE 8081 8080

# No Docker HEALTHCHECK: the image has no shell and no client to run one, and a `sluice check`
# would only validate files, not the running server. Kubernetes ignores HEALTHCHECK anyway; the
# Helm chart probes grpc.health.v1 natively. Under plain Docker, probe `GET :8080/healthcheck`
# from outside the container.
HEALTHCHECK NONE

ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve", "--config", "/etc/sluice/config"]
