// Bun entry: serves the app with Bun.serve and runs the roles in ROLES.
import { guardRequestTarget } from '../http/request-target.ts';
import { boot, drainDeadline, httpPort, stopOnSignals } from './boot.ts';
import { requestsUnderWay } from './requests-under-way.ts';

declare const Bun: {
  serve(options: { fetch: (req: Request) => Response | Promise<Response>; port: number; hostname: string; idleTimeout: number }): {
    port: number;
    stop(closeActive?: boolean): Promise<void> | void;
    timeout(request: Request, seconds: number): void;
  };
};

const started = await boot({ runtime: 'bun' });
const port = httpPort(started.config);
if (port !== undefined) {
  // idleTimeout is in whole seconds (at most 255): Bun's own 10 s is shorter than a load balancer's idle timeout
  const idleTimeout = Math.ceil(started.config.HTTP_KEEP_ALIVE_TIMEOUT_MS / 1000);
  const underWay = requestsUnderWay(started.service.app.fetch);
  const guarded = guardRequestTarget(underWay.fetch, { fallbackHost: started.config.HOST, service: started.config.SERVICE_NAME });
  // Bun's idle timeout also runs while a handler works (a command waiting for the write lock): off until it answers,
  // set on the request Bun gave (the guard may hand the app a copy)
  const fetch = async (request: Request) => {
    server.timeout(request, 0);
    try {
      return await guarded(request);
    } finally {
      server.timeout(request, idleTimeout);
    }
  };
  const server = Bun.serve({ fetch, port, hostname: started.config.HOST, idleTimeout });
  started.log.info('listening', { runtime: 'bun', port: server.port, roles: started.config.ROLES });
  stopOnSignals(started, async () => {
    // idle connections close at once, the others once their requests are answered or the drain is over
    const closed = Promise.resolve(server.stop());
    await Promise.race([closed, drainDeadline(started.config, underWay.ended)]);
    await server.stop(true);
  });
} else {
  stopOnSignals(started, () => undefined);
}
