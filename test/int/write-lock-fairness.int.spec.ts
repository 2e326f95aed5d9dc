// Two processes writing to one database: one that writes back to back (a subscriber applying a backlog, an API under
// a burst of commands) must still let the other's writes in - a joining instance's lease claims, a relay's marks -
// well within their busy budget, instead of starving them until they fail.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.ts';
import { createDatabase, sqlOf } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { openClient } from '../../src/entry/boot.ts';
import { countRows, createTempDir } from '../support/db.ts';
import { ROOT } from '../support/process.ts';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A fresh database file with the busy_writes table, opened as the service opens it with a busy budget of `budgetMs`. */
async function database(budgetMs: number) {
  const tmp = createTempDir();
  cleanups.push(() => tmp[Symbol.dispose]());
  const url = `file:${join(tmp.dir, 'app.db')}`;
  const client = await openClient(url, parseConfig({ DATABASE_URL: url, DATABASE_BUSY_TIMEOUT_MS: String(budgetMs) }));
  cleanups.push(() => client.close());
  await client.execute('CREATE TABLE busy_writes (n INTEGER PRIMARY KEY, by TEXT NOT NULL)');
  return { url, client };
}

/** Another process writing to `url` back to back (test/support/busy-writer.ts) once this resolves; stop() ends it. */
async function startBusyWriter(url: string, concurrency: number, holdMs: number) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/support/busy-writer.ts', url, String(concurrency), String(holdMs)], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const stop = async () => {
    child.stdin!.end();
    const last = await lines.next();
    await exited;
    return last.value as string | undefined;
  };
  cleanups.push(() => {
    child.kill('SIGKILL');
    return exited;
  });
  const first = await lines.next();
  if (first.value !== 'writing') throw new Error(`busy writer answered ${first.value ?? 'nothing'}`);
  return { stop };
}

describe('write lock fairness between processes', () => {
  it('a process writing back to back (100 writes queued, each holding the lock 3 ms) lets another process write within its busy budget, twelve times in a row', async () => {
    const { url, client } = await database(3000);
    const writer = createWriter(createDatabase(client));
    // more writes queued than a group takes (64): its groups hold the lock ≈ 200 ms each, one right after the other
    const busy = await startBusyWriter(url, 100, 3);
    for (let i = 0; i < 12; i++) {
      // a busy budget of 3 s: the write fails with DatabaseBusyError if the other process never lets go that long
      await writer.write((tx) => sqlOf(tx).execute("INSERT INTO busy_writes (by) VALUES ('other')"));
    }
    const said = await busy.stop();
    expect(said).toMatch(/^wrote \d+$/);
    expect(await countRows(client, 'busy_writes', "by = 'other'")).toBe(12);
    // the busy process kept writing the whole time: the other's writes went in between its own
    expect(await countRows(client, 'busy_writes', "by = 'busy'")).toBe(Number(said!.slice('wrote '.length)));
  });
});
