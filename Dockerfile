# Cordon's image: `cordon serve` over Streamable HTTP on :8080, with the probes and metrics
# on :9464, the example tools built in (served without --config) and also installed as
# files under /usr/local/share/cordon/components for configs to name.
#
#   docker build -t cordon:0.1.0 .
#   docker run --rm -p 8080:8080 -p 9464:9464 cordon:0.1.0
#
# Linted by host/tests/e2e/test_shipping.py (hadolint, any finding fails).

# The build stage: Debian bookworm with rustup's stable 1.95 for the host, and Debian's
# rustc-web route for the wasm32-wasip2 guests, exactly as `cargo xtask guests` takes it
# on a machine without rustup's wasm32-wasip2 target (xtask/src/main.rs).
FROM rust:1.95-bookworm AS build

# Debian stable's packages only change for security fixes; pinning their versions would
# break this build at the next point release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends rustc-web cargo-web rust-web-src lld-22 wasi-libc \
        python3-venv npm \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# The guests first: host/build.rs builds target/guests/example-tools.wasm into the binary.
# The caches keep downloaded crates and the build between image builds; what the image
# needs is copied out of them to /out.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/root/.cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo xtask guests \
    && cargo build --release --locked -p cordon \
    && mkdir -p /out/components \
    && cp target/release/cordon /out/ \
    && cp target/guests/*.wasm /out/components/

# The runtime stage: the binary (linked to glibc and libgcc_s only, both in bookworm-slim),
# the components, and nothing else.
FROM debian:bookworm-slim

RUN groupadd --system --gid 10001 cordon \
    && useradd --system --uid 10001 --gid cordon --home-dir /var/lib/cordon --no-create-home \
        --shell /usr/sbin/nologin cordon \
    && mkdir -p /var/cache/cordon /var/lib/cordon \
    && chown cordon:cordon /var/cache/cordon /var/lib/cordon

COPY --from=build /out/cordon /usr/local/bin/cordon
COPY --from=build /out/components/ /usr/local/share/cordon/components/

# The compile cache ($XDG_CACHE_HOME/cordon: compiled components, keyed by the component's
# hash and the engine's configuration, so an image upgrade never loads a stale entry) and
# the components' data directories ($XDG_DATA_HOME/cordon/<component>) outlive the
# container on volumes: a restart then loads compiled code instead of compiling.
ENV HOME=/var/lib/cordon \
    XDG_CACHE_HOME=/var/cache \
    XDG_DATA_HOME=/var/lib \
    CORDON_LOG=info
VOLUME ["/var/cache/cordon", "/var/lib/cordon"]

USER 10001:10001
EXPOSE 8080 9464

# /readyz on the metrics listener: 200 once every component is compiled and the MCP
# listener accepts, 503 from the start of a shutdown. bash's /dev/tcp, since the slim
# image has no HTTP client and needs none otherwise.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9464 && printf 'GET /readyz HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' >&3 && read -r -t 2 _ status _ <&3 && [ \"$status\" = 200 ]"]

ENTRYPOINT ["cordon"]
# The container's address is beyond loopback: without [[tenants]] in a config (API keys),
# cordon refuses to serve it unless told that anyone who reaches it may call every tool.
# With a config of tenants, pass `serve --http 0.0.0.0:8080 --config ...` without the flag.
CMD ["serve", "--http", "0.0.0.0:8080", "--allow-unauthenticated", "--metrics", "0.0.0.0:9464"]
