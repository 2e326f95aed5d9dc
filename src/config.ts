import { expandConfig } from '@libsql/core/config';
import { z } from 'zod';
import { DEFAULT_SERVICE_NAME, streamNameOf } from './service-name.ts';
import { formatDuration, parseDuration } from './duration.ts';

/** Thrown when the environment does not describe a valid configuration; `message` is one line naming the variable. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

const ROLE_NAMES = ['api', 'relay', 'consumers'] as const;
export type Role = (typeof ROLE_NAMES)[number];

const int = (min: number, max: number) =>
  z
    .string()
    .regex(/^\d+$/, `an integer between ${min} and ${max}`)
    .transform(Number)
    // a number of hundreds of digits reads as Infinity: out of range, not "not a number"
    .pipe(
      z
        .number({ error: `an integer between ${min} and ${max}` })
        .int()
        .min(min, `an integer between ${min} and ${max}`)
        .max(max, `an integer between ${min} and ${max}`),
    );

/** A duration (`500ms`, `30s`, `15m`, `2h`, `7d`) between `min` and `max` ms, parsed to milliseconds. */
const duration = (min: number, max: number) => {
  const message = `a duration between ${formatDuration(min)} and ${formatDuration(max)} such as 30s, 15m, 2h or 7d`;
  return z
    .string()
    .refine((v) => parseDuration(v) !== undefined, message)
    .transform((v) => parseDuration(v)!)
    .pipe(z.number().min(min, message).max(max, message));
};

const optionalText = z.string().min(1).optional();

/** A bearer token's syntax (RFC 6750 b64token); a token outside it could never be sent. */
export const BEARER_TOKEN_SYNTAX = /^[A-Za-z0-9._~+/-]+=*$/;

/**
 * Why @libsql/client would refuse `url` when it opens it (a bad query parameter, a server URL without a host), or
 * undefined when it takes it: checked here so that such a URL is a configuration error at start-up, not a crash.
 */
export function libsqlUrlProblem(url: string): string | undefined {
  try {
    const { scheme, authority, tls, path } = expandConfig({ url }, false);
    if (scheme === 'file') {
      // SQLite opens a temporary database for an empty name, and a database in memory for :memory:; both are gone
      // when the process closes them, and with them every order and event they took
      if (path === '' || path.endsWith('/')) return 'a file URL naming a database file (file:./data/app.db), not an empty path or a folder';
      if (path === ':memory:') return 'a file URL naming a database file (file:./data/app.db): a database in memory loses everything when the process ends';
      // what the local client refuses: a file URL's authority may only be empty or localhost, with no port or user
      const host = authority?.host.toLowerCase();
      if (host !== undefined && host !== '' && host !== 'localhost')
        return 'a file URL with a relative path (file:./data/app.db) or an absolute one (file:/abs/app.db or file:///abs/app.db), not a host';
      if (authority?.port !== undefined || authority?.userinfo !== undefined) return 'a file URL without a port or user';
      return undefined;
    }
    if (!authority?.host) return 'a libSQL server URL with a host, such as libsql://db.example.com';
    // what the remote clients refuse: ?tls=1 on http: or ws:, ?tls=0 on https: or wss:
    if (tls !== (scheme === 'https' || scheme === 'wss')) return `a ${scheme}: URL without ?tls=${tls ? 1 : 0} (the scheme decides TLS)`;
    return undefined;
  } catch (error) {
    return `a libSQL URL the client accepts (${error instanceof Error ? error.message.replace(/^[A-Z_]+: /, '') : String(error)})`;
  }
}

/** Adds libsqlUrlProblem's reason as the issue of a URL setting (with `{name}` filled in for a template). */
const acceptedLibsqlUrl = (value: string, ctx: z.RefinementCtx) => {
  const problem = libsqlUrlProblem(value.replaceAll('{name}', 'name'));
  if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
};

const IPV4 = /^(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
const HOST_NAME = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?$/i;

/** Whether `host` is an address to listen on: an IPv4 or IPv6 address, or a host name (RFC 1123) that is not digits alone. */
function isListenHost(host: string): boolean {
  if (IPV4.test(host)) return true;
  if (host.includes(':')) {
    // an IPv6 address, with a zone (fe80::1%eth0) for a link-local one
    const [address, zone] = host.split('%', 2) as [string, string | undefined];
    if (!/^[0-9a-f:.]+$/i.test(address) || (zone !== undefined && !/^[\w.-]+$/.test(zone))) return false;
    try {
      return new URL(`http://[${address}]/`).hostname !== '';
    } catch {
      return false;
    }
  }
  // 256.1.1.1 has the shape of a host name, but a resolver reads it as a bad address
  return HOST_NAME.test(host) && !/^[\d.]+$/.test(host);
}

const boolean = z.enum(['true', 'false', '1', '0'], { message: 'true or false' }).transform((v) => v === 'true' || v === '1');

/** Environment variables the service understands, with defaults that make `npm run dev` work without a `.env`. */
export const ConfigSchema = z.object({
  SERVICE_NAME: z
    .string()
    .regex(/^[a-z][a-z0-9-]{0,62}$/, 'lower-case letters, digits and -, starting with a letter')
    .default(DEFAULT_SERVICE_NAME),
  PORT: int(0, 65535).default(3000),
  HOST: z.string().refine(isListenHost, 'an IP address (0.0.0.0, 127.0.0.1, ::) or a host name').default('0.0.0.0'),
  /**
   * How long an idle keep-alive connection stays open (Node's keepAliveTimeout, Bun's idleTimeout in whole seconds;
   * Deno keeps idle connections until the client closes them). Above the 60 s a load balancer keeps its own idle
   * connections by default, so it never sends a request on a connection the service is closing.
   */
  HTTP_KEEP_ALIVE_TIMEOUT_MS: int(1000, 255_000).default(65_000),
  DATABASE_URL: z
    .string()
    .regex(/^(file:|libsql:|https?:|wss?:)/, 'a libSQL URL such as file:./data/app.db or libsql://host')
    .superRefine(acceptedLibsqlUrl)
    .default('file:./data/app.db'),
  DATABASE_AUTH_TOKEN: optionalText,
  DATABASE_BUSY_TIMEOUT_MS: int(0, 600_000).default(5000),
  NATS_URL: z
    .string()
    .regex(/^(nats|tls|wss?):\/\/[^,\s]+(,(nats|tls|wss?):\/\/[^,\s]+)*$/, 'one or more comma-separated nats://host:port URLs')
    .default('nats://127.0.0.1:4222'),
  NATS_CREDS: optionalText,
  NATS_TOKEN: optionalText,
  NATS_USER: optionalText,
  NATS_PASSWORD: optionalText,
  NATS_TLS_CA: optionalText,
  NATS_TLS_CERT: optionalText,
  NATS_TLS_KEY: optionalText,
  /** Default stream name and subject prefix derive from SERVICE_NAME (see service-name.ts). */
  NATS_STREAM: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,64}$/, 'a stream name of letters, digits, - and _')
    .optional(),
  EVENTS_SUBJECT_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/, 'dot-separated subject tokens without wildcards')
    .optional(),
  STREAM_MAX_BYTES: int(1024 * 1024, Number.MAX_SAFE_INTEGER).default(1024 * 1024 * 1024),
  STREAM_DUPLICATE_WINDOW_MS: int(1000, 7 * 24 * 3600 * 1000).default(10 * 60 * 1000),
  /** Replicas of the stream when it is created: 1 on a single server, 3 on a three-node JetStream cluster. */
  STREAM_REPLICAS: int(1, 5).default(1),
  /**
   * Outbox partitions (hash of aggregate type and id): relays share the work by leasing partitions, and per-aggregate
   * order lives inside one. Applied by a relay at start; a change is refused while rows are pending.
   */
  OUTBOX_PARTITIONS: int(1, 1024).default(16),
  /** How long a relay's (or a partitioned subscriber's) lease lasts without renewal; renewed every third of it (ms). */
  RELAY_LEASE_TTL_MS: int(300, 600_000).default(10_000),
  /** Names this process among the relays and subscriber instances sharing leases (default: the host name, else a random id). */
  INSTANCE_NAME: z
    .string()
    .regex(/^[A-Za-z0-9_.:-]{1,64}$/, 'up to 64 letters, digits, ., :, - and _')
    .optional(),
  RELAY_POLL_MS: int(1, 60_000).default(100),
  RELAY_BATCH: int(1, 10_000).default(500),
  RELAY_MAX_IN_FLIGHT: int(1, 10_000).default(256),
  RELAY_MAX_ATTEMPTS: int(1, 1000).default(5),
  RELAY_MAX_BACKOFF_MS: int(100, 3_600_000).default(30_000),
  RELAY_BACKOFF_BASE_MS: int(10, 60_000).default(1000),
  RELAY_PUBLISH_TIMEOUT_MS: int(100, 120_000).default(5000),
  ROLES: z
    .string()
    .transform((v) =>
      v
        .split(',')
        .map((r) => r.trim())
        .filter(Boolean),
    )
    .pipe(z.array(z.enum(ROLE_NAMES, { message: `a comma-separated list of ${ROLE_NAMES.join(', ')}` })).min(1, 'at least one role'))
    .default(['api', 'relay', 'consumers']),
  CONSUMERS: z
    .string()
    .transform((v) =>
      v
        .split(',')
        .map((r) => r.trim())
        .filter(Boolean),
    )
    .pipe(z.array(z.string().regex(/^[A-Za-z0-9_-]+$/, 'consumer names of letters, digits, - and _')))
    .optional(),
  CONSUMER_DATABASE_URL_TEMPLATE: z
    .string()
    .includes('{name}', { message: 'a libSQL URL containing {name}' })
    .superRefine(acceptedLibsqlUrl)
    .default('file:./data/{name}.db'),
  INBOX_RETENTION_DAYS: int(1, 3650).default(30),
  /** How long a stored Idempotency-Key answers a retry; older keys are compacted by the api role (ms). */
  IDEMPOTENCY_RETENTION: duration(60_000, 3650 * 86_400_000).default(86_400_000),
  /** How long `sent` outbox rows are kept; older ones are compacted by the relay role (ms). */
  OUTBOX_RETENTION: duration(60_000, 3650 * 86_400_000).default(7 * 86_400_000),
  CONSUMER_ACK_WAIT_MS: int(100, 3_600_000).default(30_000),
  CONSUMER_MAX_DELIVER: int(1, 1000).default(10),
  CONSUMER_BATCH: int(1, 10_000).default(256),
  /**
   * `true` runs each subscriber as one durable consumer per outbox partition, leased by the instances running it, so
   * several instances share its work with per-aggregate order; `false` (default) runs one consumer, active in one
   * instance at a time (the others stand by).
   */
  CONSUMER_PARTITIONED: boolean.default(false),
  METRICS_PORT: int(0, 65535).optional(),
  ADMIN_TOKEN: z
    .string()
    .min(16, 'at least 16 characters')
    .regex(BEARER_TOKEN_SYNTAX, 'letters, digits and . _ ~ + / - (then any = padding), as a bearer token is')
    .optional(),
  LOG_LEVEL: z.enum(['debug', 'info', 'warn', 'error', 'silent']).default('info'),
  MIGRATE_ON_START: boolean.default(true),
  /**
   * `async-local-storage` carries the active span across awaits (Node, Bun, Deno), so any log line and any span
   * started anywhere while a request, a publish or an event is handled names its trace; `none` (default) passes
   * trace ids explicitly (the access and error lines, `cmd.log`, a handler's `ctx.log`) and spares the cost.
   */
  TRACE_CONTEXT: z.enum(['none', 'async-local-storage']).default('none'),
});

export type Config = Omit<z.output<typeof ConfigSchema>, 'NATS_STREAM' | 'EVENTS_SUBJECT_PREFIX'> & { NATS_STREAM: string; EVENTS_SUBJECT_PREFIX: string };

/** Never echoed back in an error message; URLs are not either, as they may carry a password. */
const SECRETS = new Set(['ADMIN_TOKEN', 'DATABASE_AUTH_TOKEN', 'NATS_TOKEN', 'NATS_PASSWORD', 'NATS_USER']);

/** Parses an env record (never `process.env` directly inside the core); throws ConfigError naming the first bad variable. */
export function parseConfig(env: Record<string, string | undefined>): Config {
  const input: Record<string, string> = {};
  for (const key of Object.keys(ConfigSchema.shape)) {
    const value = env[key];
    if (value !== undefined && value !== '') input[key] = value;
  }
  const result = ConfigSchema.safeParse(input);
  if (result.success) {
    const c = result.data;
    return { ...c, NATS_STREAM: c.NATS_STREAM ?? streamNameOf(c.SERVICE_NAME), EVENTS_SUBJECT_PREFIX: c.EVENTS_SUBJECT_PREFIX ?? c.SERVICE_NAME };
  }
  const issue = result.error.issues[0]!;
  const name = String(issue.path[0] ?? 'configuration');
  const got = SECRETS.has(name) || /URL/.test(name) ? undefined : input[name];
  throw new ConfigError(`Invalid configuration: ${name} must be ${issue.message}${got === undefined ? '' : ` (got ${JSON.stringify(got)})`}`);
}
