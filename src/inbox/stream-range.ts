import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type ConsumerConfig } from '@nats-io/jetstream';
import { nanos, type NatsConnection } from '@nats-io/nats-core';
import { filterOf } from '../nats/ensure-consumer.ts';
import { toInboxMessage, type InboxMessage } from './inbox-message.ts';

/** One stream message of the range, as the inbox would see it. */
export type RangeEntry = { seq: number; msg: InboxMessage };

export type StreamRangeQuery = {
  stream: string;
  /** The stream's subject prefix (finds the aggregate of a message without aggregate headers). */
  prefix: string;
  filterSubjects: string[];
  /** Reads the messages with stream sequence in (after, upTo]. */
  after: number;
  upTo: number;
  /** Most messages read; the read stops there, incomplete. */
  limit: number;
  /** Messages handed to `page` at a time. */
  pageSize: number;
  /** How long one fetch waits for messages. */
  expiresMs: number;
};

/** The ephemeral reader's consumer: no acks, in memory, one replica, gone by itself soon after its last fetch. */
const readerConfig = (q: Pick<StreamRangeQuery, 'filterSubjects' | 'expiresMs'>): Partial<ConsumerConfig> => ({
  ack_policy: AckPolicy.None,
  ...filterOf(q.filterSubjects),
  mem_storage: true,
  num_replicas: 1,
  inactive_threshold: nanos(Math.max(5000, q.expiresMs * 2)),
});

/**
 * Reads the messages on `filterSubjects` with stream sequence in (after, upTo], in stream order, handing them to
 * `page` a page at a time (awaited before the next is read), through a short-lived ephemeral consumer deleted
 * afterwards. Resolves with whether it reached `upTo` (false: `limit` stopped it). Rejects when the broker cannot
 * serve it (unreachable, or no permission to create consumers on the stream).
 */
export async function readStreamRange(nc: NatsConnection, q: StreamRangeQuery, page: (entries: RangeEntry[]) => Promise<void>): Promise<boolean> {
  if (q.upTo <= q.after) return true;
  const jsm = await jetstreamManager(nc);
  const info = await jsm.consumers.add(q.stream, {
    ...readerConfig(q),
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: q.after + 1,
  });
  try {
    let pending = info.num_pending;
    let last = q.after;
    let read = 0;
    const consumer = await jetstream(nc).consumers.get(q.stream, info.name);
    while (pending > 0 && last < q.upTo && read < q.limit) {
      const entries: RangeEntry[] = [];
      const messages = await consumer.fetch({ max_messages: Math.min(pending, q.pageSize, q.limit - read), expires: q.expiresMs });
      let got = 0;
      try {
        for await (const m of messages) {
          got++;
          pending = m.info.pending;
          last = m.seq;
          if (m.seq > q.upTo) break;
          entries.push({ seq: m.seq, msg: toInboxMessage(m, q.prefix) });
          if (m.seq >= q.upTo || pending === 0 || entries.length >= q.pageSize) break;
        }
      } finally {
        await messages.close();
      }
      if (got === 0) throw new Error(`reading stream ${q.stream} after sequence ${last}: no message within ${q.expiresMs} ms`);
      read += entries.length;
      if (entries.length > 0) await page(entries);
    }
    return last >= q.upTo || pending === 0;
  } finally {
    await jsm.consumers.delete(q.stream, info.name).catch(() => undefined);
  }
}

/** Resolves once an ephemeral consumer like readStreamRange's could be created (and deleted again) on `stream`; rejects as it would. */
export async function probeStreamRead(nc: NatsConnection, q: Pick<StreamRangeQuery, 'stream' | 'filterSubjects' | 'expiresMs'>): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.consumers.add(q.stream, { ...readerConfig(q), deliver_policy: DeliverPolicy.New });
  await jsm.consumers.delete(q.stream, info.name).catch(() => undefined);
}
