import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import type { NatsServer } from './nats.ts';

/**
 * A `connect` for a relay or subscriber under test: on its connections, the first request to a subject matching
 * `freezeOn` (while `frozen.armed` is not false) freezes `server` (SIGSTOP) just before it goes out; `frozen.at` says when.
 */
export function freezingConnect(server: NatsServer, freezeOn: RegExp, frozen: { at?: number; armed?: boolean }, name = 'freezing client') {
  return async (): Promise<NatsConnection> => {
    const nc = await connect(natsConnectionOptions({ servers: [server.url], name }));
    const request = nc.request.bind(nc);
    nc.request = (async (subject: string, ...rest: unknown[]) => {
      if (frozen.at === undefined && frozen.armed !== false && freezeOn.test(subject)) {
        frozen.at = performance.now();
        await server.pause();
      }
      return (request as (...a: unknown[]) => Promise<unknown>)(subject, ...rest);
    }) as NatsConnection['request'];
    return nc;
  };
}

/** The ms `stop` takes to settle. */
export async function msToStop(stop: () => Promise<unknown>): Promise<number> {
  const from = performance.now();
  await stop();
  return performance.now() - from;
}

/** How many active timers and TCP sockets this process has (to show a stop left none behind). */
export function activeHandles(): { timers: number; sockets: number } {
  const info = process.getActiveResourcesInfo();
  return { timers: info.filter((r) => r === 'Timeout').length, sockets: info.filter((r) => r === 'TCPSocketWrap').length };
}
