// Deno entry: serves the app with Deno.serve and runs the roles in ROLES.
import { guardRequestTarget } from '../http/request-target.ts';
import { boot, drainDeadline, httpPort, stopOnSignals } from './boot.ts';
import { requestsUnderWay } from './requests-under-way.ts';

declare const Deno: {
  serve(
    options: { port: number; hostname: string; onListen?: (addr: { port: number }) => void },
    handler: (req: Request) => Response | Promise<Response>,
  ): { shutdown(): Promise<void> };
};

const started = await boot({ runtime: 'deno' });
const port = httpPort(started.config);
if (port !== undefined) {
  const underWay = requestsUnderWay(started.service.app.fetch);
  const server = Deno.serve(
    {
      port,
      hostname: started.config.HOST,
      onListen: (addr) => started.log.info('listening', { runtime: 'deno', port: addr.port, roles: started.config.ROLES }),
    },
    guardRequestTarget(underWay.fetch, { fallbackHost: started.config.HOST, service: started.config.SERVICE_NAME }),
  );
  // Deno's shutdown waits for every connection without a limit: past the drain, the stop goes on and the process's
  // exit closes what is left
  stopOnSignals(started, () => Promise.race([server.shutdown(), drainDeadline(started.config, underWay.ended)]));
} else {
  stopOnSignals(started, () => undefined);
}
