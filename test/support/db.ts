import type { Client } from '@libsql/client';
import { createLocalClient } from '../../src/db/local-client.ts';
import type { Hono } from 'hono';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createApp } from '../../src/app.ts';
import { registryOf, type Modules } from '../../src/compose/define-modules.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createDatabase, prepareLocalDatabase } from '../../src/db/open-database.ts';
import { createDeps, type Deps } from '../../src/deps.ts';
import { silentLogger } from '../../src/logger.ts';
import { FIXTURE_MIGRATIONS, fixtureModules } from './fixture/modules.ts';

/** A fresh temp directory, removed on dispose (`using tmp = createTempDir()`). */
export function createTempDir(prefix = 'hono-outbox-'): { dir: string; [Symbol.dispose](): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, [Symbol.dispose]: () => rmSync(dir, { recursive: true, force: true }) };
}

/** What a test database is built from: the fixture's composition and migrations unless a test names others. */
export type TestDbOptions = {
  /** Replaces parts of the Deps (clock, ids, registry, writer …). */
  deps?: Partial<Omit<Deps, 'db' | 'log'>>;
  /** The composition whose registry (and, for an app, whose contexts) to use; default: the fixture's. */
  modules?: Pick<Modules, 'events' | 'contexts'>;
  /** The service migrations folder; default: the fixture's. */
  migrations?: string;
};

/** A migrated service database in its own temp dir, with Deps wired as the service wires them; dispose closes it. */
export type TestDb = {
  dir: string;
  url: string;
  client: Client;
  deps: Deps;
  close(): void;
  [Symbol.dispose](): void;
};

/**
 * The outbox rows marked sent, wherever the mark is: status `sent`, or a pending row with an entry of its seq and id in
 * outbox_sent (a mark the relay recorded apart while draining a backlog and has not folded in yet).
 */
export const MARKED_SENT = "(status = 'sent' OR (status = 'pending' AND EXISTS (SELECT 1 FROM outbox_sent s WHERE s.seq = outbox.seq AND s.id = outbox.id)))";

/** A fresh service database (`await using t = await createTestDb()`), migrated with the fixture's migrations by default. */
export async function createTestDb(options: TestDbOptions = {}): Promise<TestDb> {
  const tmp = createTempDir();
  const url = `file:${join(tmp.dir, 'app.db')}`;
  const client = createLocalClient({ url, timeout: 5000 });
  await prepareLocalDatabase(client);
  await migrateDatabase(client, options.migrations ?? FIXTURE_MIGRATIONS.service);
  const { registry, ...over } = options.deps ?? {};
  const deps = createDeps(createDatabase(client), silentLogger, registry ?? registryOf(options.modules ?? fixtureModules), over);
  const close = () => {
    client.close();
    tmp[Symbol.dispose]();
  };
  return { dir: tmp.dir, url, client, deps, close, [Symbol.dispose]: close };
}

/** A test database with the HTTP app of its composition's contexts. */
export type TestApp = TestDb & { app: Hono };

/** The HTTP app (the composition's contexts, fixture by default) over a fresh test database; dispose closes it. */
export async function createTestApp(options: TestDbOptions = {}): Promise<TestApp> {
  const t = await createTestDb(options);
  return { ...t, app: createApp(t.deps, { contexts: (options.modules ?? fixtureModules).contexts }) };
}

/** Row count of `table` (optionally `WHERE where`) through `client`. */
export async function countRows(client: Client, table: string, where = '1 = 1', args: Array<string | number> = []): Promise<number> {
  return Number((await client.execute({ sql: `SELECT count(*) FROM ${table} WHERE ${where}`, args })).rows[0]![0]);
}

/** Row counts of `tables` (default: the fixture's command-side tables), to prove a failed request changed nothing. */
export async function tableCounts(client: Client, tables: readonly string[] = ['accounts', 'outbox', 'idempotency_keys']): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const t of tables) out[t] = await countRows(client, t);
  return out;
}
