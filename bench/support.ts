// Shared helpers for the benchmarks: a private nats-server, a temp database, percentiles, result files.
// The benchmarks measure this service as users run it, the example context and subscribers included.
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MIGRATIONS_FOLDER } from '../src/entry/boot.ts';
import { modules } from '../src/modules.ts';
import { durableNameOf } from '../src/service-name.ts';
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

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ: 100 on every Linux we run on). */
const CLOCK_TICKS = 100;

/** CPU seconds (user + system) process `pid` has used so far, from /proc (Linux); undefined where it cannot be read. */
export function cpuSecondsOf(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // the command name (2nd field) may hold spaces: count fields after its closing parenthesis
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return undefined;
  }
}

/** The pid of the first process whose argv `match` accepts, from /proc (Linux); undefined when none or elsewhere. */
export function findPid(match: (argv: string[]) => boolean): number | undefined {
  try {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').filter(Boolean);
        if (argv.length > 0 && match(argv)) return Number(entry);
      } catch {
        // gone meanwhile
      }
    }
  } catch {
    // no /proc
  }
  return undefined;
}

/**
 * Seconds the main thread of process `pid` (its event loop, for Node) has spent runnable but waiting for a CPU so far
 * (/proc/<pid>/schedstat, Linux): a process that waits long on the run queue is held back by the machine, not by its
 * own work.
 */
export function runQueueWaitSecondsOf(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[1]) / 1e9;
  } catch {
    return undefined;
  }
}

/** The machine's CPU time counters (/proc/stat, Linux): busy and total jiffies over all CPUs; undefined elsewhere. */
export function machineCpuTicks(): { busy: number; total: number } | undefined {
  try {
    const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = cpu.reduce((s, n) => s + n, 0);
    const idle = cpu[3]! + (cpu[4] ?? 0);
    return { busy: total - idle, total };
  } catch {
    return undefined;
  }
}

/** Polls `check` every `everyMs` until it answers true (then true) or `timeoutMs` passed (then false). */
export async function waitFor(check: () => Promise<boolean>, timeoutMs: number, everyMs = 500): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  return false;
}

/** Waits (at most `timeoutMs`) until the durable consumer of `subscriber` exists on the HONO_OUTBOX stream at `natsUrl`. */
export async function durableReady(natsUrl: string, subscriber: string, timeoutMs = 60_000): Promise<boolean> {
  const nc = await connect({ servers: [natsUrl] });
  try {
    const jsm = await jetstreamManager(nc);
    return await waitFor(async () => {
      try {
        await jsm.consumers.info('HONO_OUTBOX', durableNameOf('hono-outbox', subscriber));
        return true;
      } catch {
        return false;
      }
    }, timeoutMs);
  } finally {
    await nc.close();
  }
}

/** The environment of a service whose databases live in `dir` (one file per subscriber), on the broker at `natsUrl`. */
export function serviceEnv(natsUrl: string, dir: string, subscriber: string) {
  return {
    DATABASE_URL: `file:${join(dir, 'app.db')}`,
    CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(dir, '{name}.db')}`,
    CONSUMERS: subscriber,
    NATS_URL: natsUrl,
    LOG_LEVEL: 'warn',
  };
}
