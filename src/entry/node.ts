// Node entry: serves the app with @hono/node-server.
import { serve } from '@hono/node-server';
import { boot, stopOnSignals } from './boot.ts';

const started = await boot();
const { app } = started.service;
if (app) {
  const server = serve({ fetch: app.fetch, port: started.config.PORT, hostname: started.config.HOST }, (info) =>
    started.log.info('listening', { runtime: 'node', port: info.port }),
  );
  stopOnSignals(started, () => new Promise<void>((resolve) => server.close(() => resolve())));
} else {
  stopOnSignals(started, () => undefined);
}
