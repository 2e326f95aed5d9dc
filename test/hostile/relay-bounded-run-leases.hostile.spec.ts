// A run bounded by --max-messages folds its recorded marks before it ends (src/outbox/relay.ts), with other relays on
// the same database: its leases are taken away (epochs bumped, another owner) between its last pass and its fold.
// Every relay checks, before it publishes a batch, that none of its rows is already marked sent (in place or recorded).
import { describe, expect, it } from 'vitest';
import { sqlOf } from '../../src/db/open-database.ts';
import type { Writer } from '../../src/db/writer.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { expectEverySentOnceInOrder } from '../support/aggregate-order.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps, republishGuard } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('relay - the fold that ends a bounded run, with its leases moved', () => {
  it('leases taken from the bounded relay between its last pass and its fold: the fold marks only what it published, another relay publishes the rest once', {
    timeout: 25_000,
  }, async () => {
    await using t = await createTestDb();
    const accounts = accountCommands(t.deps);
    const ids = await accounts.openMany(300);
    for (const id of ids) await accounts.deposit(id, 3);
    const guard = republishGuard(t);
    const stream = await freshStream(nats().nc, 'BFLEASE');
    const owner = 'bounded-relay';
    let stolen = 0;
    let entriesAtFold = -1;
    const inner = t.deps.writer;
    const writer: Writer = {
      ...inner,
      write: (async (fn: Parameters<Writer['write']>[0], options?: Parameters<Writer['write']>[1]) => {
        if (String(fn).includes('foldSentMarks') && stolen === 0) {
          // another relay takes every partition of the bounded relay over (its epochs move on)
          stolen = await inner.write(async (tx) => {
            const res = await sqlOf(tx).execute({
              sql: "UPDATE leases SET owner = 'thief', epoch = epoch + 1, expires_at = expires_at + 600000 WHERE scope = 'relay' AND owner = ?",
              args: [owner],
            });
            return res.rowsAffected;
          });
          entriesAtFold = await countRows(t.client, 'outbox_sent');
        }
        return inner.write(fn, options);
      }) as Writer['write'],
    };
    const deps = relayDeps(t, nats().url, {
      stream,
      writer,
      settings: { batch: 25 },
      lease: { owner, ttlMs: 3000 },
      faults: { beforePublishing: guard.beforePublishing },
    });
    const summary = await createRelay(deps).run({ maxMessages: 120, timeLimitMs: 15_000 });
    expect(stolen, 'leases stolen before the fold').toBeGreaterThan(0);
    expect(entriesAtFold).toBeGreaterThan(0);
    expect(await countRows(t.client, 'outbox_sent')).toBe(0);
    const sent = await countRows(t.client, 'outbox', "status = 'sent'");
    const streamed = (await readStream(nats().nc, stream)).length;
    expect(sent).toBe(streamed);
    expect(summary.published).toBe(streamed);
    // the thief goes away; another relay takes over and drains
    await t.client.execute("UPDATE leases SET owner = NULL, expires_at = 0 WHERE owner = 'thief'");
    const next = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { batch: 25 }, faults: { beforePublishing: guard.beforePublishing } }));
    expect(next.duplicates).toBe(0);
    expect(guard.violations).toEqual([]);
    await expectEverySentOnceInOrder(t, nats().nc, stream);
  });
});
