import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient } from '../support/nats.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { appliedEvents, publishTogether, recorder, recordingDb } from '../support/recording-subscriber.ts';

// The delivery that reveals a gap in the consumer sequence may arrive while the write loop gathers a batch (it yields
// one macrotask before taking): the check it starts must hold that delivery back at once, before the check has asked
// the broker anything, or the later event of the aggregate whose delivery went missing is written first.

const nats = useNats();

describe('lost deliveries - a gap revealed while the write loop gathers a batch', () => {
  it('never applies a later event of an aggregate before its earlier event taken by another puller, even when the delivery after the gap joins a batch being gathered', async () => {
    const stream = await freshStream(nats().nc, 'RACE');
    await using sdb = await recordingDb();
    const jsm = await jetstreamManager(nats().nc);
    const info = () => jsm.consumers.info(stream.name, 'race');
    const stop = new AbortController();
    const running = testRunner(sdb, nats().url, recorder('race'), stream, { ackWaitMs: 2000, pullExpiresMs: 5000 }).run({
      signal: stop.signal,
      timeLimitMs: 50_000,
    });
    const thief = await natsClient(nats().url);
    const rounds = 12;
    const chains: IntegrationEvent[][] = [];
    try {
      const durable = await jetstream(thief)
        .consumers.get(stream.name, 'race')
        .catch(async () => {
          await eventually(async () => (await info().catch(() => undefined)) !== undefined, { what: 'the durable' });
          return jetstream(thief).consumers.get(stream.name, 'race');
        });
      for (let r = 0; r < rounds; r++) {
        const a = `race-a${r}-${process.pid}`;
        const b = `race-b${r}-${process.pid}`;
        const a1 = openedEvent({ accountId: a });
        await publishEvents(nats().nc, stream, [a1]);
        await eventually(async () => (await appliedEvents(sdb)).includes(a1.eventId), { what: `a1 of round ${r}` });
        // the runner's pull request waits at the broker; the thief's one for a single message queues behind it
        await eventually(async () => (await info()).num_waiting === 1, { what: 'the runner waiting at the broker' });
        const stolen = durable.next({ expires: 5000 });
        await eventually(async () => (await info()).num_waiting === 2, { what: 'the thief waiting too' });
        const x = openedEvent({ accountId: b });
        const [a2, a3] = [creditedEvent({ accountId: a, version: 2 }), creditedEvent({ accountId: a, version: 3 })];
        // round robin: x to the runner, a2 to the thief (never answered: due again after ack_wait), a3 to the runner
        await publishTogether(nats().nc, stream.prefix, [x, a2, a3]);
        const m = await stolen;
        expect(m?.headers?.get('Nats-Msg-Id')).toBe(a2.eventId);
        chains.push([a1, a2, a3], [x]);
        await eventually(async () => (await appliedEvents(sdb)).includes(x.eventId), { what: `x of round ${r}` });
      }
      const all = chains.flat().length;
      await eventually(async () => (await appliedEvents(sdb)).length === all, { timeoutMs: 20_000, what: 'every event applied' });
    } finally {
      await thief.close();
    }
    stop.abort();
    await running;
    const order = await appliedEvents(sdb);
    // each aggregate's events in the order they were applied, where that is not their stream order
    const disorder = chains.flatMap((c) => {
      const seen = order.flatMap((id) => c.filter((e) => e.eventId === id));
      return seen.map((e) => e.eventId).join() === c.map((e) => e.eventId).join()
        ? []
        : [seen.map((e) => `${e.aggregateId} v${e.aggregateVersion}`).join(' → ')];
    });
    expect(disorder, 'aggregates whose events were applied out of stream order').toEqual([]);
  });
});
