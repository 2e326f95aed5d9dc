import { jetstream, jetstreamManager, type ConsumerInfo } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/transport-node';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { ensureStream } from '../../src/nats/ensure-stream.ts';
import { eventSubject, type StreamSettings } from '../../src/nats/stream-settings.ts';
import { partitionOf } from '../../src/outbox/partition.ts';

/** Stream settings for tests: the service's defaults, with a name and prefix `ownStream` replaces. */
export const TEST_STREAM: StreamSettings = {
  name: 'TEST_EVENTS',
  prefix: 'test-events',
  maxBytes: 256 * 1024 * 1024,
  maxAgeMs: 7 * 24 * 3600 * 1000,
  duplicateWindowMs: 10 * 60 * 1000,
  maxMsgSize: 256 * 1024,
  maxBackoffMs: 30_000,
};

let streamNo = 0;
/** Stream settings with a name and subject prefix no other test in this process uses (so tests can share a server). */
export function ownStream(tag = 'T', over: Partial<Omit<StreamSettings, 'name' | 'prefix'>> = {}): StreamSettings {
  streamNo++;
  return { ...TEST_STREAM, ...over, name: `${tag}_${streamNo}_${process.pid}`, prefix: `${tag.toLowerCase()}${streamNo}` };
}

/** The service environment naming `stream` (NATS_STREAM, EVENTS_SUBJECT_PREFIX), for createTestService or a child process. */
export function streamEnv(stream: StreamSettings): { NATS_STREAM: string; EVENTS_SUBJECT_PREFIX: string } {
  return { NATS_STREAM: stream.name, EVENTS_SUBJECT_PREFIX: stream.prefix };
}

/** Creates the stream as the relay and the runners would. */
export async function createStream(nc: NatsConnection, stream: StreamSettings): Promise<void> {
  await ensureStream(await jetstreamManager(nc), stream);
}

/** One message of a stream: its subject, its headers (first value each) and its JSON body. */
export type StreamEntry = { seq: number; subject: string; headers: Record<string, string>; event: IntegrationEvent };

/** Every message in the stream named `stream`, in stream order. */
export async function readStream(nc: NatsConnection, stream: string | StreamSettings): Promise<StreamEntry[]> {
  const name = typeof stream === 'string' ? stream : stream.name;
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(name);
  const out: StreamEntry[] = [];
  for (let seq = info.state.first_seq; info.state.messages > 0 && seq <= info.state.last_seq; seq++) {
    const m = await jsm.streams.getMessage(name, { seq }).catch(() => null);
    if (!m) continue;
    const headers: Record<string, string> = {};
    for (const [k, v] of m.header ?? []) headers[k] = v[0] ?? '';
    out.push({ seq: m.seq, subject: m.subject, headers, event: m.json<IntegrationEvent>() });
  }
  return out;
}

/**
 * Publishes a body to the event's subject as the relay would (any body: tests send broken ones too, then to
 * `<prefix>.<aggregateType>.<aggregateId>` from `to`), with the given Nats-Msg-Id, and waits for the PubAck.
 */
export async function publishRaw(
  nc: NatsConnection,
  stream: StreamSettings,
  body: string | IntegrationEvent,
  msgId: string,
  to: { aggregateType: string; aggregateId: string } = { aggregateType: 'account', aggregateId: 'x' },
): Promise<void> {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const { aggregateType, aggregateId } = typeof body === 'string' ? to : body;
  const h = natsHeaders();
  h.set('Content-Type', 'application/json');
  await jetstream(nc).publish(
    eventSubject(stream.prefix, aggregateType, aggregateId, partitionOf(aggregateType, aggregateId, 16)),
    new TextEncoder().encode(text),
    { msgID: msgId, headers: h },
  );
}

/** Publishes each event with its eventId as Nats-Msg-Id, in order. */
export async function publishEvents(nc: NatsConnection, stream: StreamSettings, events: readonly IntegrationEvent[]): Promise<void> {
  for (const e of events) await publishRaw(nc, stream, e, e.eventId);
}

/** A stream of its own (see ownStream), already created on the server `nc` talks to. */
export async function freshStream(nc: NatsConnection, tag = 'T', over: Partial<Omit<StreamSettings, 'name' | 'prefix'>> = {}): Promise<StreamSettings> {
  const stream = ownStream(tag, over);
  await createStream(nc, stream);
  return stream;
}

/**
 * The durable consumers of `stream`, leaving out ephemeral ones (a runner's lost-delivery check reads through
 * short-lived ones) and the null that nats-server before 2.10 lists for a consumer deleted while it answers.
 */
export async function durablesOf(nc: NatsConnection, stream: string): Promise<ConsumerInfo[]> {
  const out: ConsumerInfo[] = [];
  for await (const c of await (await jetstreamManager(nc)).consumers.list(stream)) if ((c as ConsumerInfo | null)?.config.durable_name) out.push(c);
  return out;
}
