// A run bounded by --max-messages writes its last mark and folds its recorded marks before it ends (src/outbox/relay.ts);
// here another process holds the SQLite write lock past the busy budget exactly when the bounded run (a) folds its
// recorded marks, (b) writes the mark of the pass that reached the bound. Nothing may be lost, published twice or
// reordered; a row acknowledged must stay marked (recorded or in place) or come back as a duplicate; and the run must
// end without backing off first.
import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { parseConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import type { Writer } from '../../src/db/writer.ts';
import { createDeps } from '../../src/deps.ts';
import { openClient } from '../../src/entry/boot.ts';
import { silentLogger } from '../../src/logger.ts';
import { createRelay } from '../../src/outbox/relay.ts';
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

type Target = 'fold' | 'last-mark';

async function scenario(target: Target, backoffBaseMs: number) {
  await using created = await createTestDb();
  const client = await openClient(created.url, parseConfig({ DATABASE_URL: created.url, DATABASE_BUSY_TIMEOUT_MS: String(BUSY_MS) }));
  try {
    const t = { ...created, client, deps: createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)) };
    const cmds = accountCommands(t.deps);
    const ids = await cmds.openMany(60);
    // several events per aggregate, so order matters
    for (const id of ids) await cmds.deposit(id, 5);
    for (const id of ids) await cmds.deposit(id, 7);
    await using holder = await startWriteLockHolder(t.url);

    const maxMessages = 30;
    let acked = 0;
    let armed = false;
    let hit = false;
    let failedWrite: unknown;
    const inner = t.deps.writer;
    const writer: Writer = {
      ...inner,
      write: (async (fn: Parameters<Writer['write']>[0], options?: Parameters<Writer['write']>[1]) => {
        const src = String(fn);
        const isFold = src.includes('foldSentMarks');
        const isMark = src.includes('markSent');
        if (!hit && ((target === 'fold' && isFold && armed) || (target === 'last-mark' && isMark && armed))) {
          hit = true;
          await holder.lock();
          try {
            return await inner.write(fn, options);
          } catch (error) {
            failedWrite = error;
            throw error;
          } finally {
            await holder.release();
          }
        }
        return inner.write(fn, options);
      }) as Writer['write'],
    };
    const stream = await freshStream(nats().nc, 'BFLOCK');
    const deps = relayDeps(t, nats().url, {
      stream,
      writer,
      settings: { batch: 10, backoffBaseMs, maxBackoffMs: Math.max(200, backoffBaseMs * 30) },
      faults: {
        afterPubAcks: (rows) => {
          acked += rows.length;
          if (acked >= maxMessages) armed = true;
        },
      },
    });
    const summary = await createRelay(deps).run({ maxMessages, timeLimitMs: 20_000 });
    expect(hit, `the ${target} write met the lock`).toBe(true);
    expect(failedWrite, 'the locked write failed').toBeDefined();

    const streamed = await readStream(nats().nc, stream);
    const streamedIds = streamed.map((m) => m.headers['Nats-Msg-Id']);
    const marked = await countRows(client, 'outbox', MARKED_SENT);
    const entries = await countRows(client, 'outbox_sent');
    // a row counted as sent must be in the stream
    const markedIds = (await client.execute(`SELECT id FROM outbox WHERE ${MARKED_SENT}`)).rows.map((r) => String(r.id));
    const inStream = new Set(streamedIds);
    expect(
      markedIds.filter((id) => !inStream.has(id)),
      'marked sent without being in the stream',
    ).toEqual([]);

    // the next run finishes the job without publishing anything twice
    const next = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { batch: 10 } }));
    await expectEverySentOnceInOrder(t, nats().nc, stream);
    return {
      summary,
      next,
      streamedAfterRun: streamedIds.length,
      markedAfterRun: marked,
      entriesAfterRun: entries,
    };
  } finally {
    client.close();
  }
}

describe('relay - a run bounded by --max-messages meets a foreign write lock at its end', () => {
  it('lock during the fold: the recorded marks stay (rows still count as sent), the next run publishes none of them again', { timeout: 25_000 }, async () => {
    const r = await scenario('fold', 20);
    // every row the run had acknowledged is still counted as sent: via its entry
    expect(r.markedAfterRun).toBe(r.streamedAfterRun);
    expect(r.entriesAfterRun).toBeGreaterThan(0);
    expect(r.next.duplicates).toBe(0);
  });

  it('lock during the last pass mark: the rows come back as duplicates in the next run, none lost', { timeout: 25_000 }, async () => {
    const r = await scenario('last-mark', 20);
    expect(r.next.duplicates).toBeGreaterThan(0);
    expect(r.markedAfterRun + r.next.duplicates).toBe(r.streamedAfterRun);
    // the run's summary counts what it marked sent, not the pass whose mark was refused after it was counted
    expect(r.summary.published + r.summary.duplicates, JSON.stringify(r.summary)).toBe(r.markedAfterRun);
  });

  it('either way the run ends without waiting out its database back-off (a minute here): it is ending, and the next run takes what is left', {
    timeout: 25_000,
  }, async () => {
    for (const target of ['fold', 'last-mark'] as const) {
      const r = await scenario(target, 60_000);
      expect(r.markedAfterRun + r.next.duplicates, target).toBe(r.streamedAfterRun);
    }
  });
});
