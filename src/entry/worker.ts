// Cloudflare Workers entry: `fetch` serves the HTTP app over a remote libSQL database (hrana over HTTP), and
// `scheduled` (a cron trigger) runs one bounded relay pass that publishes over NATS WebSocket.
// Nothing here, nor anything it imports, may use node:* modules: the worker is bundled without nodejs_compat.
import { createClient, LibsqlError, type Client } from '@libsql/client/web';
import type { Hono } from 'hono';
import { wsconnect } from '@nats-io/nats-core';
import { ConfigError, parseConfig, type Config } from '../config.ts';
import { createDatabase } from '../db/open-database.ts';
import { AppError, toProblem } from '../errors.ts';
import { modules } from '../modules.ts';
import { createLogger, type Logger } from '../logger.ts';
import { natsConnectionOptions, type ConnectNats } from '../nats/connect.ts';
import type { RelayRunSummary } from '../outbox/relay.ts';
import { createApiRole } from '../roles/api.ts';
import { createRelayRole } from '../roles/relay.ts';
import { createRoleDeps, instanceIdOf } from '../roles/shared.ts';
import { isStartUpRefusal } from '../roles/start-up-refusals.ts';
import { createSignal } from '../signal.ts';

/** The bindings the worker reads (wrangler.toml [vars] and secrets); other keys of ConfigSchema apply too. */
export type WorkerEnv = {
  /** `libsql://…` or `https://…` of a libSQL server (sqld / Turso); local files are not reachable from a worker. */
  DATABASE_URL?: string;
  DATABASE_AUTH_TOKEN?: string;
  /** `wss://host:443` of a NATS server's websocket listener; needed by the cron relay only. */
  NATS_WS_URL?: string;
  /** The content of a NATS `.creds` file (a worker has no files to read it from). */
  NATS_CREDS?: string;
  /** The version /openapi.json states (`npm run worker:*` pass package.json's with --var). */
  SERVICE_VERSION?: string;
  /** Wall-clock bound of one cron relay pass, in ms (default 25000). */
  RELAY_TIME_LIMIT_MS?: string;
  [binding: string]: unknown;
};

/** The parts of the Workers runtime API this entry uses (declared here to need no extra type package). */
type ExecutionContext = { waitUntil(promise: Promise<unknown>): void };
type ScheduledController = { scheduledTime: number; cron: string };

const DEFAULT_RELAY_TIME_LIMIT_MS = 25_000;
/** The longest a Cron Trigger may run (15 minutes). */
const MAX_RELAY_TIME_LIMIT_MS = 900_000;

/** RELAY_TIME_LIMIT_MS in ms (default 25 s); anything but an integer from 1 to 900000 is a ConfigError naming it. */
function relayTimeLimitOf(env: WorkerEnv): number {
  const value = env.RELAY_TIME_LIMIT_MS;
  if (value === undefined || value === '') return DEFAULT_RELAY_TIME_LIMIT_MS;
  const ms = /^\d+$/.test(String(value)) ? Number(value) : Number.NaN;
  if (!(ms >= 1 && ms <= MAX_RELAY_TIME_LIMIT_MS)) {
    throw new ConfigError(`Invalid configuration: RELAY_TIME_LIMIT_MS must be an integer between 1 and ${MAX_RELAY_TIME_LIMIT_MS} (milliseconds)`);
  }
  return ms;
}

/** Whether `error` says the bindings are wrong: a start-up refusal, or a database URL the client would not take. */
const isMisconfiguration = (error: unknown): error is Error =>
  isStartUpRefusal(error) || (error instanceof LibsqlError && ['URL_INVALID', 'URL_SCHEME_NOT_SUPPORTED', 'URL_PARAM_NOT_SUPPORTED'].includes(error.code));

/** String bindings only (secrets and vars); NATS_WS_URL stands in for NATS_URL, the worker's only transport. */
function configFrom(env: WorkerEnv): Config {
  const strings: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (typeof v === 'string') strings[k] = v;
  if (strings.NATS_WS_URL) strings.NATS_URL = strings.NATS_WS_URL;
  const config = parseConfig(strings);
  if (!env.DATABASE_URL || config.DATABASE_URL.startsWith('file:')) {
    throw new ConfigError('Invalid configuration: DATABASE_URL must be the URL of a libSQL server (libsql://, https:// or http://) in a worker');
  }
  return config;
}

function openRemoteClient(config: Config): Client {
  return createClient({ url: config.DATABASE_URL, ...(config.DATABASE_AUTH_TOKEN ? { authToken: config.DATABASE_AUTH_TOKEN } : {}) });
}

/**
 * The app for one request. Everything is built per request on purpose: workerd forbids a request from doing I/O on
 * behalf of another, and the Writer's queue would run one request's transaction inside another's context. The
 * in-process write queue is not needed either: the libSQL server serializes writers itself (BEGIN IMMEDIATE).
 */
function createRequestApp(config: Config, client: Client, log: Logger, version: string | undefined): Hono {
  // No relay lives in this isolate: a commit is published at the next cron tick.
  const build = { service: config.SERVICE_NAME, version: version ?? '0.0.0', runtime: 'workerd' as const };
  const shared = createRoleDeps(createDatabase(client), { modules, log, build });
  return createApiRole(config, shared, { readiness: () => ({ nats: 'published by the cron trigger' }), ...(version ? { version } : {}) }).app;
}

/** NATS over WebSocket with the token, user/password or creds content from the bindings; TLS comes from `wss://`. */
function wsConnector(config: Config): ConnectNats {
  const options = natsConnectionOptions({
    servers: config.NATS_URL.split(','),
    name: `${config.SERVICE_NAME} worker relay`,
    ...(config.NATS_TOKEN ? { token: config.NATS_TOKEN } : {}),
    ...(config.NATS_USER ? { user: config.NATS_USER, pass: config.NATS_PASSWORD ?? '' } : {}),
    ...(config.NATS_CREDS ? { creds: new TextEncoder().encode(config.NATS_CREDS) } : {}),
  });
  // A cron pass is short: give up on an unreachable server instead of reconnecting for the whole time limit.
  return () => wsconnect({ ...options, reconnect: false });
}

/**
 * One bounded relay run: connect over WebSocket, ensure the stream, publish until nothing is due or the time limit
 * passes. The in-process wake-up of the Node relay has no counterpart here, so events wait for the next tick.
 */
export async function runScheduledRelay(env: WorkerEnv): Promise<RelayRunSummary> {
  let config: Config;
  let timeLimitMs: number;
  let client: Client;
  try {
    config = configFrom(env);
    if (!/^wss?:\/\//.test(config.NATS_URL)) throw new ConfigError('Invalid configuration: NATS_WS_URL must be a ws:// or wss:// URL in a worker');
    timeLimitMs = relayTimeLimitOf(env);
    client = openRemoteClient(config);
  } catch (error) {
    // the tick fails with the reason in the log, as a request answers `misconfigured`
    if (isMisconfiguration(error)) console.error(error.message);
    throw error;
  }
  const log = createLogger(config.LOG_LEVEL, consoleByLevel, { service: config.SERVICE_NAME, version: env.SERVICE_VERSION ?? '0.0.0' });
  try {
    const shared = createRoleDeps(createDatabase(client), { modules, log });
    const { relay } = createRelayRole(config, shared, {
      connect: wsConnector(config),
      wake: createSignal(),
      instance: instanceIdOf({ INSTANCE_NAME: config.INSTANCE_NAME ?? 'worker' }),
    });
    const summary = await relay.run({ untilIdle: true, timeLimitMs });
    log.info('relay pass done', { ...summary });
    return summary;
  } catch (error) {
    log.error('relay pass failed', { error });
    throw error;
  } finally {
    client.close();
  }
}

/** The answer while the bindings are invalid: the reason goes to the log, never to the client. */
function misconfigured(path: string): Response {
  const error = new AppError(500, 'misconfigured', 'Service misconfigured', 'The service is not configured; see the worker log.');
  return new Response(JSON.stringify(toProblem(error, path)), { status: 500, headers: { 'Content-Type': 'application/problem+json' } });
}

/** Workers keep a line's level from the console method that wrote it. */
const consoleByLevel = (line: string, level: 'debug' | 'info' | 'warn' | 'error') =>
  level === 'error' ? console.error(line) : level === 'warn' ? console.warn(line) : level === 'debug' ? console.debug(line) : console.info(line);

export default {
  async fetch(request: Request, env: WorkerEnv, ctx: ExecutionContext): Promise<Response> {
    let client: Client | undefined;
    let app: Hono;
    try {
      const config = configFrom(env);
      client = openRemoteClient(config);
      const log = createLogger(config.LOG_LEVEL, consoleByLevel, { service: config.SERVICE_NAME, version: env.SERVICE_VERSION ?? '0.0.0' });
      app = createRequestApp(config, client, log, env.SERVICE_VERSION);
    } catch (error) {
      client?.close();
      if (!isMisconfiguration(error)) throw error;
      console.error(error.message);
      return misconfigured(new URL(request.url).pathname);
    }
    try {
      return await app.fetch(request, env, ctx as never);
    } finally {
      client.close();
    }
  },

  scheduled(_controller: ScheduledController, env: WorkerEnv, ctx: ExecutionContext): void {
    ctx.waitUntil(runScheduledRelay(env));
  },
};
