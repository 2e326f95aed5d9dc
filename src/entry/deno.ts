// Deno entry: serves the app with Deno.serve and runs the roles in ROLES.
import { guardRequestTarget } from '../http/request-target.ts';
import { boot, httpPort, stopOnSignals } from './boot.ts';

declare const Deno: {
  serve(
    options: { port: number; hostname: string; onListen?: (addr: { port: number }) => void },
    handler: (req: Request) => Response | Promise<Response>,
  ): { shutdown(): Promise<void> };
};

const started = await boot({ runtime: 'deno' });
const port = httpPort(started.config);
if (port !== undefined) {
  const server = Deno.serve(
    {
      port,
      hostname: started.config.HOST,
      onListen: (addr) => started.log.info('listening', { runtime: 'deno', port: addr.port, roles: started.config.ROLES }),
    },
    guardRequestTarget(started.service.app.fetch, { fallbackHost: started.config.HOST, service: started.config.SERVICE_NAME }),
  );
  stopOnSignals(started, () => server.shutdown());
} else {
  stopOnSignals(started, () => undefined);
}
