// Bun entry: serves the app with Bun.serve.
import { boot, stopOnSignals } from './boot.ts';

declare const Bun: {
  serve(options: { fetch: (req: Request) => Response | Promise<Response>; port: number; hostname: string }): {
    port: number;
    stop(closeActive?: boolean): Promise<void> | void;
  };
};

const started = await boot();
const { app } = started.service;
if (app) {
  const server = Bun.serve({ fetch: app.fetch, port: started.config.PORT, hostname: started.config.HOST });
  started.log.info('listening', { runtime: 'bun', port: server.port });
  stopOnSignals(started, () => server.stop());
} else {
  stopOnSignals(started, () => undefined);
}
