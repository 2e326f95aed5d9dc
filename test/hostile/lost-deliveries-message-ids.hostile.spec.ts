import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient } from '../support/nats.ts';
import { freshStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { appliedEvents, publishTogether, recorder, recordingDb } from '../support/recording-subscriber.ts';

// The check matches the stream's messages with the inbox by the id the inbox records, decoded from the body, not by
// their headers: an event the subscriber already applied or ignored and acknowledged, lying between the ack floor
// and the highest delivered sequence, is never taken for a missing delivery, whatever its Nats-Msg-Id or Event-Type.

const nats = useNats();
const ackWaitMs = 10_000; // a message taken for missing would hold its aggregate for 16 s; b1 comes back after 10 s

/**
 * b1 is taken by another puller and never answered (the ack floor stays below it for ack_wait); then `a1` is
 * published as `how` says and applied (or ignored) by a first run, which stops. A second run starts with b1
 * unacknowledged at the broker, so it checks; `a2`, published then, must be applied at once.
 */
async function scenario(
  tag: string,
  types: string[],
  how: { msgId: () => string | null; eventType?: boolean },
  a1: IntegrationEvent,
  a2: IntegrationEvent,
  a1Applied: boolean,
) {
  const stream = await freshStream(nats().nc, tag);
  await using sdb = await recordingDb();
  const name = tag.toLowerCase();
  const b1 = creditedEvent({ accountId: `${name}-b-${process.pid}`, version: 2 }); // of a type every variant applies
  const jsm = await jetstreamManager(nats().nc);
  const info = () => jsm.consumers.info(stream.name, name);
  const subscriber = recorder(name, types);

  let pulling = false;
  const stop1 = new AbortController();
  const first = testRunner(sdb, nats().url, subscriber, stream, { ackWaitMs }).run({
    signal: stop1.signal,
    timeLimitMs: 30_000,
    lease: { mayPull: () => pulling, holds: () => true },
  });
  await eventually(async () => (await info().catch(() => undefined)) !== undefined, { what: 'the durable' });
  await publishTogether(nats().nc, stream.prefix, [b1]);
  const thief = await natsClient(nats().url);
  try {
    const stolen = await (await jetstream(thief).consumers.get(stream.name, name)).next({ expires: 2000 });
    expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(b1.eventId);
    pulling = true;
    await publishTogether(nats().nc, stream.prefix, [a1], how);
    // one snapshot: b1 alone pending (before a1 was delivered) and a1 delivered must not come from two answers
    await eventually(
      async () => {
        const now = await info();
        return now.num_ack_pending === 1 && now.delivered.stream_seq === 2;
      },
      { what: 'a1 answered' },
    );
    expect(await appliedEvents(sdb)).toEqual(a1Applied ? [a1.eventId] : []);
    stop1.abort();
    await first;

    const stop2 = new AbortController();
    const second = testRunner(sdb, nats().url, subscriber, stream, { ackWaitMs }).run({ signal: stop2.signal, timeLimitMs: 30_000 });
    await new Promise((r) => setTimeout(r, 300)); // the second run's start-up check
    await publishTogether(nats().nc, stream.prefix, [a2]);
    await eventually(async () => (await appliedEvents(sdb)).includes(a2.eventId), { timeoutMs: 25_000, what: 'a2 applied' });
    // nothing of a's aggregate is missing: a2 went on at once, while b1 is still with the other puller (its ack_wait
    // has not run out, so the broker has not delivered it again); waiting for a1 would have outlasted that
    expect(await appliedEvents(sdb)).not.toContain(b1.eventId);
    stop2.abort();
    await second;
  } finally {
    await thief.close();
  }
}

describe('lost deliveries - messages the check cannot match with the inbox by their headers', () => {
  const all = ['account.opened.v1', 'account.credited.v1', 'account.closed.v1'];

  it('applies a later event at once after a restart when an earlier event of its aggregate was applied and acknowledged above the ack floor (headers as the relay sends them)', async () => {
    const a = `relayid-a-${process.pid}`;
    const a1 = openedEvent({ accountId: a });
    await scenario('RELAYID', all, { msgId: () => a1.eventId }, a1, creditedEvent({ accountId: a, version: 2 }), true);
  });

  it('applies a later event at once after a restart when an earlier applied event of its aggregate was published without Nats-Msg-Id', async () => {
    const a = `noid-a-${process.pid}`;
    await scenario('NOID', all, { msgId: () => null }, openedEvent({ accountId: a }), creditedEvent({ accountId: a, version: 2 }), true);
  });

  it('applies a later event at once after a restart when an earlier applied event of its aggregate carries a Nats-Msg-Id other than its eventId', async () => {
    const a = `otherid-a-${process.pid}`;
    const a1 = openedEvent({ accountId: a });
    await scenario('OTHERID', all, { msgId: () => `relay-${a1.eventId}` }, a1, creditedEvent({ accountId: a, version: 2 }), true);
  });

  it('applies a later event at once after a restart when an earlier event of its aggregate, of a type the subscriber ignores, came without Event-Type header', async () => {
    const a = `ignored-a-${process.pid}`;
    const a1 = openedEvent({ accountId: a });
    await scenario('IGNTYPE', ['account.credited.v1'], { msgId: () => a1.eventId, eventType: false }, a1, creditedEvent({ accountId: a, version: 2 }), false);
  });
});
