import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll } from 'vitest';
import { natsClient, startNats, type NatsServer } from './nats.ts';

/** One test file's broker: the server, its URL and a client connection. */
export type NatsHandle = { server: NatsServer; url: string; nc: NatsConnection };

/**
 * Starts one private nats-server for the calling test file (beforeAll) with a client connection, and stops both
 * after the file (afterAll). Call at the file's top level; the returned accessor is valid inside tests and hooks.
 */
export function useNats(options: { websocket?: boolean } = {}): () => NatsHandle {
  let handle: NatsHandle | undefined;
  beforeAll(async () => {
    const server = await startNats(options);
    handle = { server, url: server.url, nc: await natsClient(server.url) };
  });
  afterAll(async () => {
    await handle?.nc.close();
    await handle?.server[Symbol.asyncDispose]();
    handle = undefined;
  });
  return () => {
    if (!handle) throw new Error('useNats(): the server is only there inside tests and hooks of the file that called it');
    return handle;
  };
}
