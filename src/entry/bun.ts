// Bun entry: serves the app with Bun.serve and runs the roles in ROLES.
import { guardRequestTarget } from '../http/request-target.ts';
import { boot, httpPort, stopOnSignals } from './boot.ts';

declare const Bun: {
  serve(options: { fetch: (req: Request) => Response | Promise<Response>; port: number; hostname: string }): {
    port: number;
    stop(closeActive?: boolean): Promise<void> | void;
  };
};

const started = await boot({ runtime: 'bun' });
const port = httpPort(started.config);
if (port !== undefined) {
  const fetch = guardRequestTarget(started.service.app.fetch, { fallbackHost: started.config.HOST, service: started.config.SERVICE_NAME });
  const server = Bun.serve({ fetch, port, hostname: started.config.HOST });
  started.log.info('listening', { runtime: 'bun', port: server.port, roles: started.config.ROLES });
  stopOnSignals(started, () => server.stop());
} else {
  stopOnSignals(started, () => undefined);
}
