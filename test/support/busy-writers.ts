import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseConfig } from '../../src/config.ts';
import { openClient } from '../../src/entry/boot.ts';
import { createTempDir } from './db.ts';
import { ROOT } from './process.ts';

/** What a test undoes after it, last first. */
export type Cleanups = Array<() => unknown>;

/**
 * A fresh database file with the table busy_writes (n, by) and `tables` (same columns), opened as the service opens it
 * with a busy budget of `budgetMs`; closed and removed through `cleanups`.
 */
export async function busyWritesDatabase(cleanups: Cleanups, budgetMs: number, tables: readonly string[] = []) {
  const tmp = createTempDir();
  cleanups.push(() => tmp[Symbol.dispose]());
  const url = `file:${join(tmp.dir, 'app.db')}`;
  const client = await openClient(url, parseConfig({ DATABASE_URL: url, DATABASE_BUSY_TIMEOUT_MS: String(budgetMs) }));
  cleanups.push(() => client.close());
  for (const table of ['busy_writes', ...tables]) await client.execute(`CREATE TABLE ${table} (n INTEGER PRIMARY KEY, by TEXT NOT NULL)`);
  return { url, client };
}

/**
 * Another process writing to `url` back to back (test/support/busy-writer.ts: `concurrency` writes queued, each holding
 * the lock `holdMs`), writing once this resolves; `preload` is imported first (e.g. a clock that steps), `env` added.
 * `stop()` ends it and resolves with its last line (`wrote <rows>`); `signal()` sends it a signal; SIGKILLed in cleanups.
 */
export async function startBusyWriter(
  cleanups: Cleanups,
  url: string,
  concurrency: number,
  holdMs: number,
  options: { preload?: string; env?: Record<string, string> } = {},
) {
  const preload = options.preload ? ['--import', options.preload] : [];
  const child = spawn(process.execPath, ['--import', 'tsx', ...preload, 'test/support/busy-writer.ts', url, String(concurrency), String(holdMs)], {
    cwd: ROOT,
    env: { ...process.env, ...options.env },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  cleanups.push(() => {
    child.kill('SIGKILL');
    return exited;
  });
  const first = await lines.next();
  if (first.value !== 'writing') throw new Error(`busy writer answered ${first.value ?? 'nothing'}`);
  return {
    async stop() {
      child.stdin!.end();
      const last = await lines.next();
      await exited;
      return last.value as string | undefined;
    },
    signal: (signal: NodeJS.Signals) => child.kill(signal),
  };
}
