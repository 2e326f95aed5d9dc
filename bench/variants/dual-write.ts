// Variant (d)'s publish step: one JetStream publish per event, awaited (PubAck) before the HTTP answer.
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { ConnectNats } from '../../src/nats/connect.ts';
import { ensureStream } from '../../src/nats/ensure-stream.ts';
import { eventSubject, type StreamSettings } from '../../src/nats/stream-settings.ts';
import { partitionOf } from '../../src/outbox/partition.ts';
import { eventHeaders } from '../../src/outbox/event-headers.ts';
import type { AfterCommit } from './state-only.ts';

/** Connects, ensures the stream, and returns an AfterCommit that publishes each event with the relay's headers. */
export async function createInlinePublisher(connect: ConnectNats, stream: StreamSettings): Promise<{ publish: AfterCommit; close(): Promise<void> }> {
  const nc = await connect();
  await ensureStream(await jetstreamManager(nc), stream);
  const js = jetstream(nc);
  const enc = new TextEncoder();
  return {
    async publish(events) {
      for (const e of events) {
        const h = eventHeaders(e);
        await js.publish(
          eventSubject(stream.prefix, e.aggregateType, e.aggregateId, partitionOf(e.aggregateType, e.aggregateId, 16)),
          enc.encode(JSON.stringify(e)),
          { msgID: e.eventId, headers: h },
        );
      }
    },
    close: () => nc.close(),
  };
}
