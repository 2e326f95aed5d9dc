// Deno entry: serves the app with Deno.serve.
import { boot, stopOnSignals } from './boot.ts';

declare const Deno: {
  serve(
    options: { port: number; hostname: string; onListen?: (addr: { port: number }) => void },
    handler: (req: Request) => Response | Promise<Response>,
  ): { shutdown(): Promise<void> };
};

const started = await boot();
const { app } = started.service;
if (app) {
  const server = Deno.serve(
    {
      port: started.config.PORT,
      hostname: started.config.HOST,
      onListen: (addr) => started.log.info('listening', { runtime: 'deno', port: addr.port }),
    },
    app.fetch,
  );
  stopOnSignals(started, () => server.shutdown());
} else {
  stopOnSignals(started, () => undefined);
}
