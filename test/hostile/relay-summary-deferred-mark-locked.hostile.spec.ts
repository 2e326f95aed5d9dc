// A relay run's summary (RelayRunSummary) when the mark of a pass counted while that mark was still being written
// (a deferred mark, while draining a backlog) is refused because another process holds the SQLite write lock: in the
// middle of a bounded run, in an unbounded run until idle, and in a run stopped meanwhile. The summary must never go
// negative nor count a pass twice, and what it counts must be what the run marked sent; nothing lost or reordered.
import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { parseConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import type { Writer } from '../../src/db/writer.ts';
import { createDeps } from '../../src/deps.ts';
import { openClient } from '../../src/entry/boot.ts';
import { silentLogger } from '../../src/logger.ts';
import { createRelay, type RelayRunSummary } from '../../src/outbox/relay.ts';
import { expectEverySentOnceInOrder } from '../support/aggregate-order.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb, MARKED_SENT } from '../support/db.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

const nats = useNats();
const BUSY_MS = 800;

type Run = { maxMessages?: number; untilIdle?: boolean; stopOnHit?: boolean };

/** Locks the database for the `locks` mark writes that begin once `armAt` rows were acknowledged; runs `run`. */
async function scenario(run: Run, armAt: number, locks = 1) {
  await using created = await createTestDb();
  const client = await openClient(created.url, parseConfig({ DATABASE_URL: created.url, DATABASE_BUSY_TIMEOUT_MS: String(BUSY_MS) }));
  try {
    const t = { ...created, client, deps: createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)) };
    const cmds = accountCommands(t.deps);
    const ids = await cmds.openMany(80);
    for (const id of ids) await cmds.deposit(id, 5);
    await using holder = await startWriteLockHolder(t.url);
    let acked = 0;
    let hits = 0;
    let refused = 0;
    const abort = new AbortController();
    const inner = t.deps.writer;
    const writer: Writer = {
      ...inner,
      write: (async (fn: Parameters<Writer['write']>[0], options?: Parameters<Writer['write']>[1]) => {
        if (hits < locks && acked >= armAt && String(fn).includes('markSent')) {
          hits++;
          await holder.lock();
          if (run.stopOnHit) abort.abort();
          try {
            return await inner.write(fn, options);
          } catch (error) {
            refused++;
            throw error;
          } finally {
            await holder.release();
          }
        }
        return inner.write(fn, options);
      }) as Writer['write'],
    };
    const stream = await freshStream(nats().nc, 'SUMLOCK');
    const deps = relayDeps(t, nats().url, {
      stream,
      writer,
      settings: { batch: 10, backoffBaseMs: 20, maxBackoffMs: 200 },
      faults: { afterPubAcks: (rows) => void (acked += rows.length) },
    });
    const summary: RelayRunSummary = await createRelay(deps).run({
      timeLimitMs: 20_000,
      signal: abort.signal,
      ...(run.maxMessages !== undefined ? { maxMessages: run.maxMessages } : {}),
      ...(run.untilIdle ? { untilIdle: true } : {}),
    });
    const streamed = (await readStream(nats().nc, stream)).length;
    const marked = await countRows(client, 'outbox', MARKED_SENT);
    const next = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { batch: 10 } }));
    await expectEverySentOnceInOrder(t, nats().nc, stream);
    return { summary, hits, refused, streamed, marked, next };
  } finally {
    client.close();
  }
}

function expectSane(r: Awaited<ReturnType<typeof scenario>>) {
  const what = JSON.stringify(r);
  expect(r.hits, what).toBeGreaterThan(0);
  expect(r.refused, what).toBeGreaterThan(0);
  for (const [k, v] of Object.entries(r.summary)) expect(v, `${k}: ${what}`).toBeGreaterThanOrEqual(0);
  // what the run counts is what it marked sent (a fresh database: every marked row is this run's)
  expect(r.summary.published + r.summary.duplicates, what).toBe(r.marked);
  expect(r.marked + r.next.duplicates, what).toBe(r.streamed);
}

describe('relay summary - a deferred mark refused by a foreign write lock', () => {
  it('in the middle of a run bounded by --max-messages (not its last pass)', { timeout: 40_000 }, async () => {
    const r = await scenario({ maxMessages: 120 }, 30);
    expectSane(r);
    expect(r.summary.published + r.summary.duplicates, JSON.stringify(r)).toBeGreaterThanOrEqual(120);
  });

  it('twice in a row in a bounded run (the next pass’s deferred mark refused too)', { timeout: 40_000 }, async () => {
    expectSane(await scenario({ maxMessages: 120 }, 30, 2));
  });

  it('in a run until idle', { timeout: 40_000 }, async () => {
    const r = await scenario({ untilIdle: true }, 50);
    expectSane(r);
    expect(r.next.published, JSON.stringify(r)).toBe(0);
  });

  it('in a run stopped while the refused mark was being written', { timeout: 40_000 }, async () => {
    expectSane(await scenario({ stopOnHit: true }, 50));
  });
});
