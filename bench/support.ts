// Shared helpers for the benchmarks: a private nats-server, a temp database, percentiles, result files.
// The benchmarks measure this service as users run it, the example context and subscribers included.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MIGRATIONS_FOLDER } from '../src/entry/boot.ts';
import { modules } from '../src/modules.ts';
import { createTestDb, type TestDb } from '../test/support/db.ts';

export { startNats } from '../test/support/nats.ts';

/** A fresh, migrated database of this service (db/migrations) with Deps over its composition (src/modules.ts). */
export function createServiceDb(): Promise<TestDb> {
  return createTestDb({ modules, migrations: MIGRATIONS_FOLDER });
}

/** The p-th percentile (0–100) of `values` (nearest rank). */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;

/** Writes `result` to bench/results/<name>-<timestamp>.json and returns the path. */
export function saveResult(name: string, result: unknown): string {
  const dir = join(import.meta.dirname, 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${name}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(result, null, 2));
  return file;
}

/** Reads `--name value` from argv as a number, or the default. */
export function numberArg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? Number(process.argv[i + 1]) : fallback;
}
