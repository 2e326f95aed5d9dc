// Another process holds the write lock while urgent writes (lease renewals) and plain ones are queued interleaved at
// different moments: each write waits its own busy budget from its own write() call, whatever its place in the queue
// (an urgent one at the head may outlive the plain ones behind it, which must still run out on time). When the lock
// is released, the writes whose budget ran out earlier have failed busy and left nothing; those still waiting commit
// exactly once.
import { afterEach, describe, expect, it } from 'vitest';
import { DatabaseBusyError } from '../../src/db/busy.ts';
import { createDatabase, sqlOf } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { busyWritesDatabase, type Cleanups } from '../support/busy-writers.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

const cleanups: Cleanups = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

const BUDGET_MS = 1500;
/** How late past its own deadline a write may fail busy: timers on a loaded two-core machine, never a whole budget. */
const LATE_MS = 500;
/** Writes whose deadline falls this close to the release may go either way. */
const EDGE_MS = 100;

type Sent = { n: number; urgent: boolean; at: number; runs: number; done?: number; outcome?: 'committed' | 'busy' | string };

describe('writer - urgent and plain writes interleaved under another process lock', () => {
  it('each write, urgent or plain, fails busy no earlier than its own budget after its own call and leaves no row; those still waiting when the lock is released commit exactly once', {
    timeout: 20_000,
    retry: 1,
  }, async () => {
    const { url, client } = await busyWritesDatabase(cleanups, BUDGET_MS);
    const holder = await startWriteLockHolder(url);
    cleanups.push(() => holder[Symbol.asyncDispose]());
    const writer = createWriter(createDatabase(client));
    await writer.write((tx) => sqlOf(tx).execute("INSERT INTO busy_writes (n, by) VALUES (0, 'warm')"));
    await holder.lock();

    const t0 = performance.now();
    const sent: Sent[] = [];
    const settled: Promise<void>[] = [];
    // 40 rounds 25 ms apart over 1 s: a plain write, then an urgent one, then (every other round) two more of each,
    // so urgent writes queued later sit ahead of plain writes queued earlier.
    for (let round = 0; round < 40; round++) {
      const kinds = round % 2 === 0 ? [false, true] : [false, true, false, true, true, false];
      for (const urgent of kinds) {
        const s: Sent = { n: sent.length + 1, urgent, at: performance.now(), runs: 0 };
        sent.push(s);
        settled.push(
          writer
            .write(
              async (tx) => {
                s.runs++;
                await sqlOf(tx).execute({ sql: 'INSERT INTO busy_writes (n, by) VALUES (?, ?)', args: [s.n, urgent ? 'urgent' : 'plain'] });
                return s.n;
              },
              { urgent },
            )
            .then(
              (v) => {
                s.done = performance.now();
                s.outcome = v === s.n ? 'committed' : `resolved with ${String(v)}`;
              },
              (error: unknown) => {
                s.done = performance.now();
                s.outcome = error instanceof DatabaseBusyError ? 'busy' : String(error);
              },
            ),
        );
      }
      await delay(25);
    }
    // released once the writes queued in the first ~0.4 s have run out and the later ones still wait
    await delay(Math.max(0, t0 + BUDGET_MS + 400 - performance.now()));
    const releaseFrom = performance.now();
    await holder.release();
    const releasedBy = performance.now();

    const all = Promise.all(settled).then(() => true);
    expect(await Promise.race([all, delay(BUDGET_MS + 5000).then(() => false)]), 'every write settles').toBe(true);
    await writer.idle();
    const rows = new Map((await client.execute('SELECT n, by FROM busy_writes WHERE n > 0')).rows.map((r) => [Number(r.n), String(r.by)]));

    const wrong: string[] = [];
    for (const s of sent) {
      const deadline = s.at + BUDGET_MS;
      const what = `#${s.n} ${s.urgent ? 'urgent' : 'plain'} queued at ${(s.at - t0).toFixed(0)} ms`;
      if (s.outcome === 'busy') {
        const waited = s.done! - s.at;
        if (waited < BUDGET_MS - 1) wrong.push(`${what} failed busy after ${waited.toFixed(0)} ms, before its ${BUDGET_MS} ms budget`);
        if (waited > BUDGET_MS + LATE_MS) wrong.push(`${what} failed busy only after ${waited.toFixed(0)} ms`);
        if (rows.has(s.n)) wrong.push(`${what} failed busy but its row is there`);
        if (deadline > releasedBy + EDGE_MS)
          wrong.push(`${what} failed busy though the lock was released ${(deadline - releasedBy).toFixed(0)} ms before its deadline`);
      } else if (s.outcome === 'committed') {
        if (rows.get(s.n) !== (s.urgent ? 'urgent' : 'plain')) wrong.push(`${what} committed but has no row`);
        if (s.runs !== 1) wrong.push(`${what} ran ${s.runs} times`);
        if (deadline < releaseFrom - EDGE_MS)
          wrong.push(`${what} committed though its budget ran out ${(releaseFrom - deadline).toFixed(0)} ms before the release`);
      } else wrong.push(`${what}: ${String(s.outcome)}`);
    }
    expect(wrong).toEqual([]);
    // both kinds on both sides of the release, or the test proved nothing
    for (const urgent of [false, true]) {
      expect(sent.filter((s) => s.urgent === urgent && s.outcome === 'busy').length).toBeGreaterThan(10);
      expect(sent.filter((s) => s.urgent === urgent && s.outcome === 'committed').length).toBeGreaterThan(10);
    }
    expect(rows.size).toBe(sent.filter((s) => s.outcome === 'committed').length);
  });
});
