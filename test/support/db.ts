import { createClient, type Client } from '@libsql/client';
import { afterEach } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createApp } from '../../src/app.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createDatabase, prepareLocalDatabase } from '../../src/db/open-database.ts';
import { createDeps, type Deps } from '../../src/deps.ts';
import { silentLogger } from '../../src/logger.ts';

export const MIGRATIONS = join(import.meta.dirname, '../../db/migrations');

/** A fresh temp directory removed by the returned dispose. */
export function createTempDir(prefix = 'hono-outbox-'): { dir: string; [Symbol.dispose](): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, [Symbol.dispose]: () => rmSync(dir, { recursive: true, force: true }) };
}

export type TestDb = {
  dir: string;
  url: string;
  client: Client;
  deps: Deps;
  close(): void;
};

/** A migrated service database in its own temp dir, with Deps wired as the service wires them. */
export async function createTestDb(overrides: Partial<Deps> = {}): Promise<TestDb> {
  const tmp = createTempDir();
  const url = `file:${join(tmp.dir, 'app.db')}`;
  const client = createClient({ url, timeout: 5000 });
  await prepareLocalDatabase(client);
  await migrateDatabase(client, MIGRATIONS);
  const deps: Deps = { ...createDeps(createDatabase(client), silentLogger), ...overrides };
  return {
    dir: tmp.dir,
    url,
    client,
    deps,
    close() {
      client.close();
      tmp[Symbol.dispose]();
    },
  };
}

/** The HTTP app over a fresh test database. */
export async function createTestApp(overrides: Partial<Deps> = {}) {
  const t = await createTestDb(overrides);
  return { ...t, app: createApp(t.deps) };
}

export type TestApp = Awaited<ReturnType<typeof createTestApp>>;

/** Returns a factory for one test app per test; the app is closed after each test. Call at a test file's top level. */
export function testAppPerTest(): () => Promise<TestApp> {
  let current: TestApp | undefined;
  afterEach(() => {
    current?.close();
    current = undefined;
  });
  return async () => (current = await createTestApp());
}

/** A valid POST /orders body; `over` replaces fields. */
export function orderBody(over: Record<string, unknown> = {}) {
  return {
    customerId: 'cust-1',
    currency: 'EUR',
    items: [
      { sku: 'sku-1', quantity: 2, unitPriceCents: 1250 },
      { sku: 'sku-2', quantity: 1, unitPriceCents: 499 },
    ],
    ...over,
  };
}

/** Row counts of the command-side tables, to prove a failed request changed nothing. */
export async function tableCounts(client: Client): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const t of ['orders', 'order_lines', 'outbox', 'idempotency_keys']) {
    out[t] = Number((await client.execute(`SELECT count(*) AS n FROM ${t}`)).rows[0]![0]);
  }
  return out;
}
