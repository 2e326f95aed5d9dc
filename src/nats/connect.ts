import type { ConnectionOptions, NatsConnection } from '@nats-io/nats-core';
import { credsAuthenticator } from '@nats-io/nats-core';
import { unlessStopped } from '../worker/unless-stopped.ts';

/** Connection settings resolved by an entry file (it reads the creds and TLS files). */
export type NatsConnectSettings = {
  servers: string[];
  name: string;
  token?: string;
  user?: string;
  pass?: string;
  creds?: Uint8Array;
  tls?: { ca?: string; cert?: string; key?: string };
};

/**
 * The longest a worker without a connection waits before it tries to connect again, however long its broker back-off
 * has grown: a connected client reconnects every `reconnectTimeWait` on its own, a refused connect costs the broker
 * nothing, and a broker that comes up is then used within about a second instead of after up to the maximum back-off.
 */
export const CONNECT_RETRY_MS = 1000;

/**
 * Options for any transport's `connect`: every server of NATS_URL in the pool, reconnect forever, so callers see
 * outages as errors and retry.
 * On a cluster the client moves to another node at once when its node goes away (the wait applies per server), keeps
 * the nodes it learns from the cluster, and notices a node that hangs without closing the socket after two missed
 * pings (20 to 30 s). No `waitOnFirstConnect`: the first `connect` tries the servers in turn and rejects when none
 * answers, so the relay and the runners stay stoppable and report the outage while they retry with back-off.
 */
export function natsConnectionOptions(s: NatsConnectSettings): ConnectionOptions {
  return {
    servers: s.servers,
    name: s.name,
    reconnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    pingInterval: 10_000,
    maxPingOut: 2,
    // An Error with a stack for every request, kept in case it fails, was a sixth of a relay's CPU: failures are told
    // apart by their type and code, never by where they were created.
    noAsyncTraces: true,
    ...(s.token ? { token: s.token } : {}),
    ...(s.user ? { user: s.user, pass: s.pass ?? '' } : {}),
    ...(s.creds ? { authenticator: credsAuthenticator(s.creds) } : {}),
    ...(s.tls ? { tls: { ...(s.tls.ca ? { ca: s.tls.ca } : {}), ...(s.tls.cert ? { cert: s.tls.cert } : {}), ...(s.tls.key ? { key: s.tls.key } : {}) } } : {}),
  };
}

/** Opens a connection; each runtime's entry passes its transport (`connect` or `wsconnect`). */
export type ConnectNats = () => Promise<NatsConnection>;

/**
 * `connect()`, or undefined as soon as `signal` aborts (at once when it already has): a broker host that accepts the
 * TCP connection and never answers holds a connect until the client's own timeout (20 s), longer than a stop may
 * wait. A connection that arrives after (or together with) the stop is closed.
 */
export async function connectUnlessStopped(connect: ConnectNats, signal: AbortSignal): Promise<NatsConnection | undefined> {
  if (signal.aborted) return undefined;
  const attempt = connect();
  const nc = await unlessStopped(attempt, signal);
  if (nc === undefined) {
    attempt.then(
      (late) => late.close().catch(() => undefined),
      () => undefined,
    );
    return undefined;
  }
  if (signal.aborted) {
    // the connect won the race in the same turn as the stop
    await nc.close().catch(() => undefined);
    return undefined;
  }
  return nc;
}
