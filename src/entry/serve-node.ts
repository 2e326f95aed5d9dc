import { serve } from '@hono/node-server';
import { httpPort, type Started } from './boot.ts';

/** Serves `started.service.app` with @hono/node-server when this process has a port; returns the close function. */
export function serveOnNode(started: Started): () => Promise<void> {
  const port = httpPort(started.config);
  if (port === undefined) return async () => undefined;
  const server = serve({ fetch: started.service.app.fetch, port, hostname: started.config.HOST }, (info) =>
    started.log.info('listening', { runtime: 'node', port: info.port, roles: started.config.ROLES }),
  );
  return () => new Promise<void>((resolve) => server.close(() => resolve()));
}
