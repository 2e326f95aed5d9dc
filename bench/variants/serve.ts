// Entry of the baseline servers of `npm run bench:commands`: VARIANT=ceiling | state-only | dual-write, served on
// whichever runtime runs this file (node --import tsx, bun, deno run -A). Like src/entry/*, it is the only
// variant file that touches the runtime; configuration comes from the same env variables as the service.
import { loadConfigOrExit, MIGRATIONS_FOLDER, natsConnector, openClient } from '../../src/entry/boot.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { type Deps, TRACER_NAME } from '../../src/deps.ts';
import { trace } from '@opentelemetry/api';
import { registryOf } from '../../src/compose/define-modules.ts';
import { modules } from '../../src/modules.ts';
import { createUuidV7 } from '../../src/ids.ts';
import { createLogger } from '../../src/logger.ts';
import { streamSettingsFrom } from '../../src/nats/stream-settings.ts';
import { createSignal } from '../../src/signal.ts';
import { createCeilingApp } from './ceiling.ts';
import { createInlinePublisher } from './dual-write.ts';
import { createStateOnlyApp } from './state-only.ts';
import { createWorkerWriterApp, startWriterThread } from './worker-writer.ts';

declare const Bun: { serve(o: { fetch: (r: Request) => Response | Promise<Response>; port: number; hostname: string }): { stop(): unknown } };
declare const Deno: { serve(o: { port: number; hostname: string }, h: (r: Request) => Response | Promise<Response>): { shutdown(): Promise<void> } };

const variant = process.env.VARIANT ?? '';
const config = loadConfigOrExit();
const log = createLogger(config.LOG_LEVEL);
const cleanups: Array<() => unknown> = [];

async function buildFetch(): Promise<(req: Request) => Response | Promise<Response>> {
  if (variant === 'ceiling') return createCeilingApp(createUuidV7()).fetch;
  if (variant !== 'state-only' && variant !== 'dual-write' && variant !== 'worker-writer')
    throw new Error(`VARIANT must be ceiling, state-only, dual-write or worker-writer (got ${JSON.stringify(variant)})`);
  const client = await openClient(config.DATABASE_URL, config);
  cleanups.push(() => client.close());
  await migrateDatabase(client, MIGRATIONS_FOLDER);
  const db = createDatabase(client);
  const deps: Deps = {
    db,
    writer: createWriter(db),
    registry: registryOf(modules),
    clock: () => new Date(),
    newId: createUuidV7(),
    log,
    outboxCommitted: createSignal(),
    tracer: trace.getTracer(TRACER_NAME),
  };
  cleanups.unshift(() => deps.writer.idle());
  if (variant === 'state-only') return createStateOnlyApp(deps).fetch;
  if (variant === 'worker-writer') {
    const thread = await startWriterThread(process.env as Record<string, string>);
    cleanups.push(() => thread.close());
    return createWorkerWriterApp(deps, thread).fetch;
  }
  const publisher = await createInlinePublisher(natsConnector(config, 'bench dual-write'), streamSettingsFrom(config));
  cleanups.unshift(() => publisher.close());
  return createStateOnlyApp(deps, publisher.publish).fetch;
}

const fetchHandler = await buildFetch();
let closeServer: () => unknown;
if ('Bun' in globalThis) {
  const server = Bun.serve({ fetch: fetchHandler, port: config.PORT, hostname: config.HOST });
  closeServer = () => server.stop();
} else if ('Deno' in globalThis) {
  const server = Deno.serve({ port: config.PORT, hostname: config.HOST }, fetchHandler);
  closeServer = () => server.shutdown();
} else {
  const { serve } = await import('@hono/node-server');
  const server = serve({ fetch: fetchHandler, port: config.PORT, hostname: config.HOST });
  closeServer = () => new Promise<void>((resolve) => server.close(() => resolve()));
}
log.info('listening', { variant, port: config.PORT });

const stop = async () => {
  await closeServer();
  for (const c of cleanups) await c();
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
