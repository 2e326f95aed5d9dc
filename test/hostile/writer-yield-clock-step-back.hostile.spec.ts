// The writer's turns on the write lock (createWriter: the yield of a saturated writer, the busy deadlines) must not
// depend on the wall clock. When it is stepped back (NTP, a VM resumed, an operator fixing the time) the writer must
// not turn the size of the step into a pause of its queue, nor stop leaving the lock free to other processes.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DatabaseBusyError } from '../../src/db/busy.ts';
import { createDatabase, sqlOf } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { sleep } from '../../src/worker/sleep.ts';
import { busyWritesDatabase, startBusyWriter, type Cleanups } from '../support/busy-writers.ts';

const cleanups: Cleanups = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Date.now shifted by `offset.ms` from the real clock (the wall clock stepped by that much). */
function steppableClock() {
  const realNow = Date.now.bind(Date);
  const offset = { ms: 0 };
  vi.spyOn(Date, 'now').mockImplementation(() => realNow() + offset.ms);
  return offset;
}

/**
 * Another process writing to `url` back to back (100 writes queued, 3 ms each) whose wall clock steps back 30 s at
 * each stepClock() (test/support/clock-step-on-signal.ts).
 */
async function startBusyWriterWithSteppableClock(url: string) {
  const busy = await startBusyWriter(cleanups, url, 100, 3, { preload: './test/support/clock-step-on-signal.ts', env: { CLOCK_STEP_MS: '-30000' } });
  return { stepClock: () => busy.signal('SIGUSR2') };
}

describe('writer - wall clock stepped back', () => {
  it('a write queued after the clock stepped back 30 s commits within a second, though the writer had just held the lock for over a second', async () => {
    const { client } = await busyWritesDatabase(cleanups, 3000, ['w']);
    const writer = createWriter(createDatabase(client));
    const clock = steppableClock();
    // back-to-back groups holding the lock ≈ 1.2 s in all: the writer has held it for HOLD_BEFORE_YIELD_MS
    await Promise.all(
      Array.from({ length: 12 }, () =>
        writer.write(async (tx) => {
          await sqlOf(tx).execute("INSERT INTO w (by) VALUES ('busy')");
          await sleep(100);
        }),
      ),
    );
    await writer.idle();
    clock.ms = -30_000;
    const started = performance.now();
    const done = writer.write((tx) => sqlOf(tx).execute("INSERT INTO w (by) VALUES ('after the step')")).then(() => performance.now() - started);
    const took = await Promise.race([done, sleep(5_000).then(() => Number.POSITIVE_INFINITY)]);
    expect(took).toBeLessThan(1_000);
  });

  it('a lease renewal (an urgent write) commits within 500 ms when the clock stepped back 30 s while the writer idled after a backlog', async () => {
    const { client } = await busyWritesDatabase(cleanups, 3000, ['w']);
    const writer = createWriter(createDatabase(client));
    const clock = steppableClock();
    // a backlog applied one write after the other, each holding the lock 130 ms: the eighth takes the writer's hold
    // past HOLD_BEFORE_YIELD_MS just as the backlog ends
    for (let i = 0; i < 8; i++) {
      await writer.write(async (tx) => {
        await sqlOf(tx).execute("INSERT INTO w (by) VALUES ('backlog')");
        await sleep(130);
      });
    }
    await sleep(200);
    clock.ms = -30_000;
    await sleep(200);
    const started = performance.now();
    const renewal = writer.write((tx) => sqlOf(tx).execute("INSERT INTO w (by) VALUES ('renewal')"), { urgent: true }).then(() => performance.now() - started);
    const took = await Promise.race([renewal, sleep(5_000).then(() => Number.POSITIVE_INFINITY)]);
    expect(took).toBeLessThan(500);
  });

  it("a process writing back to back keeps leaving the lock free to another process's writes after its clock stepped back 30 s: each of that process's writes gets in within its 3 s busy budget", async () => {
    const { url, client } = await busyWritesDatabase(cleanups, 3000, ['w']);
    const writer = createWriter(createDatabase(client));
    const busy = await startBusyWriterWithSteppableClock(url);
    // its groups (≈ 200 ms each, one right after the other) hold the lock nearly all the time: the step lands in one
    await sleep(1_500);
    busy.stepClock();
    let failed = 0;
    const waits: number[] = [];
    for (let i = 0; i < 5; i++) {
      await sleep(300);
      const started = performance.now();
      try {
        await writer.write((tx) => sqlOf(tx).execute("INSERT INTO busy_writes (by) VALUES ('other')"));
      } catch (error) {
        if (!(error instanceof DatabaseBusyError)) throw error;
        failed++;
      }
      waits.push(Math.round(performance.now() - started));
    }
    expect(failed, `waits (ms): ${waits.join(', ')}`).toBe(0);
  }, 60_000);
});
