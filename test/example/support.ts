// Helpers for the example's tests: the example composition (src/modules.ts) over its own migrations. Deleted with the
// example.
import type { Client } from '@libsql/client';
import { APP_MIGRATIONS } from '../../src/entry/boot.ts';
import { modules } from '../../src/modules.ts';
import { createTestApp, createTestDb, tableCounts, type TestApp, type TestDb } from '../support/db.ts';

/** A fresh database of the example service (db/migrations) with its registry. */
export function createExampleDb(): Promise<TestDb> {
  return createTestDb({ modules, migrations: APP_MIGRATIONS.service });
}

/** The example service's HTTP app over a fresh database. */
export function createExampleApp(): Promise<TestApp> {
  return createTestApp({ modules, migrations: APP_MIGRATIONS.service });
}

/** The example's command-side tables. */
export const ORDER_TABLES = ['orders', 'order_lines', 'outbox', 'idempotency_keys'] as const;

/** Row counts of the example's command-side tables, to prove a failed request changed nothing. */
export function orderTableCounts(client: Client): Promise<Record<string, number>> {
  return tableCounts(client, ORDER_TABLES);
}
