# syntax=docker/dockerfile:1
# One image for every role: ROLES=api | relay | consumers (comma-separated; the default runs all three).
# The runtime stage's `npm ci`, CMD and HEALTHCHECK are exactly what test/e2e/production-build.e2e.spec.ts runs (it
# reads them from this file); `npm run test:image` builds this image and runs it (healthchecks, uid, an order end to
# end, a restart on the volume, docker stop, the relay-only and consumers-only roles).

# --- build: compile src/ to dist/ -------------------------------------------------------------------------------
FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# tsc needs no install scripts and no optional packages (native binaries such as bun, deno, workerd and esbuild
# for development): both only make the build stage slower and larger
RUN npm ci --ignore-scripts --omit=optional --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

# --- runtime: production dependencies and the compiled JavaScript only ------------------------------------------
FROM node:20-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
# dist/entry/boot.js reads ../../db/migrations, i.e. /app/db/migrations
COPY db ./db
# libSQL files live on a volume mounted here; the image runs as the unprivileged `node` user (uid 1000)
RUN mkdir -p /app/data && chown node:node /app/data
USER node
ENV HOST=0.0.0.0 \
    PORT=3000 \
    DATABASE_URL=file:/app/data/app.db \
    CONSUMER_DATABASE_URL_TEMPLATE=file:/app/data/{name}.db
VOLUME ["/app/data"]
EXPOSE 3000
# /health on PORT with the api role, else on METRICS_PORT (set it for relay-only and consumers-only containers)
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "const r=(process.env.ROLES||'api').split(',').map(s=>s.trim());const p=r.includes('api')?(process.env.PORT||3000):process.env.METRICS_PORT;if(!p){console.error('no HTTP port: set METRICS_PORT');process.exit(1)}fetch('http://127.0.0.1:'+p+'/health').then(x=>process.exit(x.ok?0:1),()=>process.exit(1))"]
CMD ["node", "--enable-source-maps", "dist/entry/node.js"]
