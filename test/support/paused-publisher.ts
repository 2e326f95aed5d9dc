import type { NatsConnection } from '@nats-io/transport-node';
import { createAckPublisher, type AckPublisher } from '../../src/nats/ack-publisher.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { natsClient, startNats, type NatsServer } from './nats.ts';
import { createStream, ownStream } from './stream.ts';

/** A private broker frozen (SIGSTOP) after its stream was created, and an ack publisher on a connection to it. */
export type PausedPublisher = {
  own: NatsServer;
  nc: NatsConnection;
  stream: StreamSettings;
  publisher: AckPublisher;
  /** Resumes the broker, closes the publisher and the connection, kills the broker. */
  [Symbol.asyncDispose](): Promise<void>;
};

/** Starts a broker with a stream tagged `tag`, an ack publisher that waits `timeoutMs` for PubAcks, and freezes the broker. */
export async function pausedPublisher(tag: string, timeoutMs: number): Promise<PausedPublisher> {
  const own = await startNats();
  const nc = await natsClient(own.url);
  const stream = ownStream(tag);
  await createStream(nc, stream);
  const publisher = createAckPublisher(nc, timeoutMs);
  await own.pause();
  return {
    own,
    nc,
    stream,
    publisher,
    async [Symbol.asyncDispose]() {
      own.resume();
      publisher.close();
      await nc.close().catch(() => undefined);
      await own[Symbol.asyncDispose]();
    },
  };
}
