import type { ConnectionOptions, NatsConnection } from '@nats-io/nats-core';
import { credsAuthenticator } from '@nats-io/nats-core';

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

/** Options for any transport's `connect`: reconnect forever, so callers see outages as errors and retry. */
export function natsConnectionOptions(s: NatsConnectSettings): ConnectionOptions {
  return {
    servers: s.servers,
    name: s.name,
    reconnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    pingInterval: 10_000,
    ...(s.token ? { token: s.token } : {}),
    ...(s.user ? { user: s.user, pass: s.pass ?? '' } : {}),
    ...(s.creds ? { authenticator: credsAuthenticator(s.creds) } : {}),
    ...(s.tls ? { tls: { ...(s.tls.ca ? { ca: s.tls.ca } : {}), ...(s.tls.cert ? { cert: s.tls.cert } : {}), ...(s.tls.key ? { key: s.tls.key } : {}) } } : {}),
  };
}

/** Opens a connection; each runtime's entry passes its transport (`connect` or `wsconnect`). */
export type ConnectNats = () => Promise<NatsConnection>;
