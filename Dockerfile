# onnxd on CPU: `onnxd serve` (a node and the /v1 facade in front of it) in one container. The server process is
# PID 1, started directly (no npm, no shell), so `docker stop`'s SIGTERM reaches the process that drains.
#   docker build -t onnxd .
#   docker run -e ONNXD_JWT_SECRET=... -p 8080:8080 -v onnxd-data:/app/data -v onnxd-models:/app/models onnxd
# test/cli/supervise.int.test.ts runs this file's CMD with its ENV and checks its ports and health check against the code.

# Build: every dependency (dev ones too), then the TypeScript build; then the dev dependencies go.
FROM node:20-bookworm-slim AS build
ENV ONNXRUNTIME_NODE_INSTALL=skip
# No toolchain: every native dependency (onnxruntime-node, koffi, @photostructure/sqlite) ships its Linux binaries
# inside its npm package, so nothing is compiled.
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
# No install script runs: the dependencies need none (package.json's allowScripts; .ci/run installs the same way), and
# the project's own `prepare` (the build) runs below, once src/ is copied.
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

# Runtime: production dependencies and the compiled code only, as the unprivileged `node` user.
# NODE_ENV=production makes the facade require ONNXD_JWT_SECRET (or a JWKS), and refuse a placeholder or guessable
# one. The drain grace (8 s) fits within `docker stop`'s default 10 s before SIGKILL; raise both together
# (ONNXD_DRAIN_TIMEOUT_MS, `docker run --stop-timeout`). HF_HOME puts the cache of hub models (ONNXD_MODEL=owner/name)
# in the models volume, so a model is downloaded once, not at every start.
FROM node:20-bookworm-slim
ENV NODE_ENV=production \
    ONNXRUNTIME_NODE_INSTALL=skip \
    HF_HOME=/app/models/huggingface \
    ONNXD_HOST=0.0.0.0 \
    ONNXD_NODE_HOST=0.0.0.0 \
    ONNXD_DRAIN_TIMEOUT_MS=8000
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
# data/: the SQLite store and the generated secrets. models/: bundles, and the default model built on first start.
RUN mkdir -p data models && chown node:node data models
USER node
VOLUME ["/app/data", "/app/models"]
# 8080: the public /v1 facade (ONNXD_PORT). 8081: the node's internal contract, /health and /metrics (ONNXD_NODE_PORT).
EXPOSE 8080 8081
# Ready (200) once the model is loaded; 503 while loading, draining or stalled. The port follows ONNXD_NODE_PORT.
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
  CMD ["node", "-e", "fetch(`http://127.0.0.1:${process.env.ONNXD_NODE_PORT || 8081}/health`).then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))"]
STOPSIGNAL SIGTERM
CMD ["node", "bin/onnxd.js", "serve"]
