// Bun entry: serves the app with Bun.serve and runs the roles in ROLES.
import { guardRequestTarget } from '../http/request-target.ts';
import { boot, HTTP_DRAIN_MS, httpPort, stopOnSignals } from './boot.ts';

declare const Bun: {
  serve(options: { fetch: (req: Request) => Response | Promise<Response>; port: number; hostname: string; idleTimeout: number }): {
    port: number;
    stop(closeActive?: boolean): Promise<void> | void;
  };
};

const started = await boot({ runtime: 'bun' });
const port = httpPort(started.config);
if (port !== undefined) {
  const fetch = guardRequestTarget(started.service.app.fetch, { fallbackHost: started.config.HOST, service: started.config.SERVICE_NAME });
  // idleTimeout is in whole seconds (at most 255): Bun's own 10 s is shorter than a load balancer's idle timeout
  const idleTimeout = Math.ceil(started.config.HTTP_KEEP_ALIVE_TIMEOUT_MS / 1000);
  const server = Bun.serve({ fetch, port, hostname: started.config.HOST, idleTimeout });
  started.log.info('listening', { runtime: 'bun', port: server.port, roles: started.config.ROLES });
  stopOnSignals(started, async () => {
    // requests under way get HTTP_DRAIN_MS, then every connection left is closed
    const cut = setTimeout(() => void server.stop(true), HTTP_DRAIN_MS);
    try {
      await server.stop();
    } finally {
      clearTimeout(cut);
    }
  });
} else {
  stopOnSignals(started, () => undefined);
}
