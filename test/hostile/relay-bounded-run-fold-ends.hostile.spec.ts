// A run bounded by --max-messages folds its recorded marks before it ends (src/outbox/relay.ts): at most as many fold
// writes as the entries there when it began folding take. Another relay that keeps recording marks (draining its
// backlog) must not keep it folding: this test models the worst interleaving, one pass of the other relay (batch 500,
// its marks recorded in outbox_sent) before every fold write of the bounded run. Folding while whole batches come
// back, the run would return only once the other relay had drained everything.
import { describe, expect, it } from 'vitest';
import type { Writer } from '../../src/db/writer.ts';
import { createAckPublisher } from '../../src/nats/ack-publisher.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { relayPass } from '../../src/outbox/relay-pass.ts';
import type { Floor } from '../../src/outbox/relay-store.ts';
import { expectEverySentOnceInOrder } from '../support/aggregate-order.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('relay - another relay recording marks between the fold writes of a bounded run', () => {
  it('the bounded run folds what was recorded when it began folding and returns, without waiting for the other relay’s whole drain', {
    // 16,000 commands and two drains: about 12 s on an idle 2-core machine, over 30 s beside the rest of the suite
    timeout: 90_000,
  }, async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(16_000);
    const stream = await freshStream(nats().nc, 'BFENDLESS');
    // the other relay, driven pass by pass (unleased: every partition; the bounded relay no longer publishes then)
    const otherDeps = relayDeps(t, nats().url, { stream, settings: { batch: 500 } });
    const publisher = createAckPublisher(nats().nc, 5000);
    let floor: Floor = { seq: 0, epoch: null };
    let otherDrained = false;
    const otherPass = async () => {
      if (otherDrained) return;
      const pass = await relayPass(otherDeps, publisher, { floor, markLater: 50_000 });
      floor = pass.scannedTo;
      if (!pass.more) otherDrained = true;
    };
    let folds = 0;
    let armed = false;
    const inner = t.deps.writer;
    const writer: Writer = {
      ...inner,
      write: (async (fn: Parameters<Writer['write']>[0], options?: Parameters<Writer['write']>[1]) => {
        if (armed && String(fn).includes('foldSentMarks')) {
          folds++;
          // the other relay's mark lands before this fold write
          await otherPass();
        }
        return inner.write(fn, options);
      }) as Writer['write'],
    };
    const deps = relayDeps(t, nats().url, {
      stream,
      writer,
      settings: { batch: 500 },
      faults: {
        afterPubAcks: () => {
          armed = true;
        },
      },
    });
    const summary = await createRelay(deps).run({ maxMessages: 500, timeLimitMs: 25_000 });
    expect(summary.published).toBeGreaterThanOrEqual(500);

    // the next run sends the rest: every event once, in each aggregate's order, nothing left recorded
    await drainOutbox(relayDeps(t, nats().url, { stream, settings: { batch: 500 } }));
    await expectEverySentOnceInOrder(t, nats().nc, stream);

    // the bounded run itself had 2000 marks to fold (4 writes); it folded on while the other relay kept recording
    expect(otherDrained, 'the bounded run outlasted the other relay’s whole drain').toBe(false);
    expect(folds).toBeLessThanOrEqual(8);
  });
});
