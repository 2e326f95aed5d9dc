// A run bounded by --max-messages folds its recorded marks before it ends (src/outbox/relay.ts); here a stop signal, or
// the run's time limit, arrives while it folds a large set of recorded marks (several FOLD_BATCH writes). The run must return after the fold
// write in progress, without losing a mark: the rest stays recorded (counted as sent) and the next run folds it and
// publishes none of those rows again.
import { describe, expect, it } from 'vitest';
import type { Writer } from '../../src/db/writer.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { expectEverySentOnceInOrder } from '../support/aggregate-order.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb, MARKED_SENT } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

type How = 'signal' | 'time-limit';

async function scenario(how: How) {
  await using t = await createTestDb();
  const ids = await accountCommands(t.deps).openMany(2600);
  expect(ids).toHaveLength(2600);
  const stream = await freshStream(nats().nc, 'BFSTOP');
  const abort = new AbortController();
  let folds = 0;
  let firstFoldAt = 0;
  const inner = t.deps.writer;
  const writer: Writer = {
    ...inner,
    write: (async (fn: Parameters<Writer['write']>[0], options?: Parameters<Writer['write']>[1]) => {
      if (String(fn).includes('foldSentMarks')) {
        folds++;
        if (folds === 1) {
          firstFoldAt = Date.now();
          if (how === 'signal') abort.abort();
        }
        // slow folds, so that a time limit lands in the middle of them
        if (how === 'time-limit') await new Promise((r) => setTimeout(r, 400));
      }
      return inner.write(fn, options);
    }) as Writer['write'],
  };
  const deps = relayDeps(t, nats().url, { stream, writer, settings: { batch: 200 } });
  const started = Date.now();
  const summary = await createRelay(deps).run({
    maxMessages: 2000,
    signal: abort.signal,
    // the drain takes well under a second here; the slowed folds (400 ms each, 4+ of them) run past the limit
    timeLimitMs: how === 'time-limit' ? 1500 : 20_000,
  });
  const returned = Date.now();
  const entriesLeft = await countRows(t.client, 'outbox_sent');
  const marked = await countRows(t.client, 'outbox', MARKED_SENT);
  const streamed = (await readStream(nats().nc, stream)).map((m) => m.headers['Nats-Msg-Id']);
  const markedIds = (await t.client.execute(`SELECT id FROM outbox WHERE ${MARKED_SENT}`)).rows.map((r) => String(r.id));
  const inStream = new Set(streamed);
  expect(
    markedIds.filter((id) => !inStream.has(id)),
    'marked without being in the stream',
  ).toEqual([]);
  // every acknowledged row is still marked (in place or recorded)
  expect(marked).toBe(streamed.length);

  const next = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { batch: 200 } }));
  expect(next.duplicates, 'the next run published rows the bounded run had acknowledged').toBe(0);
  await expectEverySentOnceInOrder(t, nats().nc, stream);
  return { summary, folds, entriesLeft, runMs: returned - started, afterFirstFoldMs: returned - firstFoldAt, streamed: streamed.length };
}

describe('relay - a stop or the time limit during the fold that ends a bounded run', () => {
  it('a stop signal at the first fold write: one batch folded, the rest left recorded, nothing republished', { timeout: 25_000 }, async () => {
    const r = await scenario('signal');
    expect(r.folds).toBe(1);
    expect(r.entriesLeft).toBeGreaterThan(0);
    expect(r.afterFirstFoldMs).toBeLessThan(1000);
  });

  it('the time limit expiring in the middle of slow fold writes: the run stops after the write in progress', { timeout: 25_000 }, async () => {
    const r = await scenario('time-limit');
    expect(r.summary.published).toBeGreaterThanOrEqual(2000);
    // 2000+ entries need 5+ fold writes of 400 ms: the limit stopped the loop early
    expect(r.entriesLeft).toBeGreaterThan(0);
    expect(r.runMs).toBeLessThan(1500 + 400 + 500);
  });
});
