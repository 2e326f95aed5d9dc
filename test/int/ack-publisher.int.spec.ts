import { MsgHdrsImpl } from '@nats-io/nats-core/internal';
import { describe, expect, it } from 'vitest';
import { createAckPublisher, type AckCallback } from '../../src/nats/ack-publisher.ts';
import { isBrokerUnavailable } from '../../src/outbox/publish-errors.ts';
import { pausedPublisher } from '../support/paused-publisher.ts';
import { createStream, ownStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const body = (text: string) => new TextEncoder().encode(text);
const withId = (id: string) => MsgHdrsImpl.fromRecord({ 'Nats-Msg-Id': [id] });

type Outcome = { error: unknown; ack?: { stream: string; seq: number; duplicate: boolean } };
/** A callback that records every call, and a promise of the first. */
function recorder() {
  const calls: Outcome[] = [];
  let first: (o: Outcome) => void = () => undefined;
  const settled = new Promise<Outcome>((resolve) => (first = resolve));
  const done: AckCallback = (error, ack) => {
    calls.push({ error, ack });
    first({ error, ack });
  };
  return { calls, settled, done };
}

describe('ack publisher - pipelined JetStream publishing with one reply subscription', () => {
  it('acknowledges each message with its stream sequence, in any number in flight, each callback called once', async () => {
    const stream = ownStream('ACK');
    await createStream(nats().nc, stream);
    const publisher = createAckPublisher(nats().nc, 5000);
    const records = Array.from({ length: 600 }, () => recorder());
    records.forEach((r, i) => publisher.publish(`${stream.prefix}.account.a-${i}.0`, body(`{"n":${i}}`), withId(`ack-${i}`), r.done));
    const outcomes = await Promise.all(records.map((r) => r.settled));
    expect(outcomes.every((o) => o.error === undefined && o.ack?.stream === stream.name && o.ack.duplicate === false)).toBe(true);
    expect(new Set(outcomes.map((o) => o.ack!.seq)).size).toBe(600);
    expect(records.every((r) => r.calls.length === 1)).toBe(true);
    expect(publisher.pending()).toBe(0);
    publisher.close();
  });

  it('reports a message published again with the same Nats-Msg-Id as a duplicate, stored once', async () => {
    const stream = ownStream('ACK');
    await createStream(nats().nc, stream);
    const publisher = createAckPublisher(nats().nc, 5000);
    const first = recorder();
    const again = recorder();
    publisher.publish(`${stream.prefix}.account.a.0`, body('{}'), withId('same-id'), first.done);
    publisher.publish(`${stream.prefix}.account.a.0`, body('{}'), withId('same-id'), again.done);
    expect((await first.settled).ack).toMatchObject({ duplicate: false, seq: 1 });
    expect((await again.settled).ack).toMatchObject({ duplicate: true, seq: 1 });
    publisher.close();
  });

  it('a subject no stream takes answers no responders, which the relay treats as the broker being unavailable', async () => {
    const publisher = createAckPublisher(nats().nc, 5000);
    const r = recorder();
    publisher.publish('no-stream-here.account.a.0', body('{}'), withId('orphan'), r.done);
    const { error, ack } = await r.settled;
    expect(ack).toBeUndefined();
    expect(isBrokerUnavailable(error)).toBe(true);
    publisher.close();
  });

  it("a message the stream refuses (over its maximum size) fails with the stream's error, a permanent one", async () => {
    const stream = ownStream('ACK', { maxMsgSize: 1024 });
    await createStream(nats().nc, stream);
    const publisher = createAckPublisher(nats().nc, 5000);
    const r = recorder();
    publisher.publish(`${stream.prefix}.account.a.0`, body(`{"pad":"${'x'.repeat(4000)}"}`), withId('too-big'), r.done);
    const { error } = await r.settled;
    expect(error).toBeInstanceOf(Error);
    expect(String((error as Error).message)).toMatch(/maximum|size/i);
    expect(isBrokerUnavailable(error)).toBe(false);
    publisher.close();
  });

  it('messages whose PubAck never comes (the broker frozen) time out once, as unavailable, and a late answer is ignored', async () => {
    await using paused = await pausedPublisher('ACK', 300);
    const { own, nc, stream, publisher } = paused;
    const records = Array.from({ length: 5 }, () => recorder());
    const started = performance.now();
    records.forEach((r, i) => publisher.publish(`${stream.prefix}.account.a-${i}.0`, body('{}'), withId(`frozen-${i}`), r.done));
    const outcomes = await Promise.all(records.map((r) => r.settled));
    expect(performance.now() - started, JSON.stringify(outcomes)).toBeGreaterThanOrEqual(290);
    expect(outcomes.every((o) => o.ack === undefined && isBrokerUnavailable(o.error))).toBe(true);
    own.resume();
    await nc.flush();
    await new Promise((r) => setTimeout(r, 100));
    expect(records.every((r) => r.calls.length === 1)).toBe(true);
    expect(publisher.pending()).toBe(0);
  });

  it('closing fails what is still in flight at once, and a publish after the close fails without being sent', async () => {
    await using paused = await pausedPublisher('ACK', 60_000);
    const { stream, publisher } = paused;
    const inFlight = recorder();
    publisher.publish(`${stream.prefix}.account.a.0`, body('{}'), withId('in-flight'), inFlight.done);
    publisher.close();
    expect(isBrokerUnavailable((await inFlight.settled).error)).toBe(true);
    const late = recorder();
    publisher.publish(`${stream.prefix}.account.a.0`, body('{}'), withId('late'), late.done);
    expect(late.calls).toHaveLength(1);
    expect(isBrokerUnavailable(late.calls[0]!.error)).toBe(true);
  });

  it('a connection closed under it fails every message in flight, each once', async () => {
    await using paused = await pausedPublisher('ACK', 60_000);
    const { nc, stream, publisher } = paused;
    const records = Array.from({ length: 3 }, () => recorder());
    records.forEach((r, i) => publisher.publish(`${stream.prefix}.account.a-${i}.0`, body('{}'), withId(`closing-${i}`), r.done));
    await nc.close();
    const outcomes = await Promise.all(records.map((r) => r.settled));
    expect(outcomes.every((o) => isBrokerUnavailable(o.error))).toBe(true);
    expect(records.every((r) => r.calls.length === 1)).toBe(true);
  });
});
