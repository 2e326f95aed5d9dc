import type { Client } from '@libsql/client';
import type { Hono } from 'hono';
import { createApp } from './app.ts';
import type { Config } from './config.ts';
import { createDatabase } from './db/open-database.ts';
import { createWriter } from './db/writer.ts';
import type { Deps } from './deps.ts';
import { createAppRegistry } from './events/catalog.ts';
import { createUuidV7 } from './ids.ts';
import type { Logger } from './logger.ts';
import { createSignal } from './signal.ts';

export type Service = {
  deps: Deps;
  /** The HTTP app, present when the `api` role runs. */
  app?: Hono;
  /** Stops the background roles and waits for queued writes. */
  stop(): Promise<void>;
};

/** Wires the service's parts for the roles in `config`; the caller owns the client and serves `app.fetch`. */
export async function createService(config: Config, io: { client: Client; log: Logger; clock?: () => Date }): Promise<Service> {
  const db = createDatabase(io.client);
  const deps: Deps = {
    db,
    writer: createWriter(db),
    registry: createAppRegistry(),
    clock: io.clock ?? (() => new Date()),
    newId: createUuidV7(),
    log: io.log,
    outboxCommitted: createSignal(),
  };
  const app = config.ROLES.includes('api') ? createApp(deps) : undefined;
  return {
    deps,
    ...(app ? { app } : {}),
    async stop() {
      await deps.writer.idle();
    },
  };
}
