import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ConfigError, parseConfig } from '../../src/config.ts';
import { createTempDir } from '../support/db.ts';
import { runtimeCommand, runToExit } from '../support/process.ts';

/** Parses and returns the ConfigError, failing the test if parsing succeeds or throws something else. */
function configErrorOf(env: Record<string, string>): ConfigError {
  try {
    parseConfig(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error(`parseConfig accepted ${JSON.stringify(env)}`);
}

describe('config - defaults', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
  });

  it('an empty env gives the documented defaults', () => {
    expect(parseConfig({})).toMatchObject({
      PORT: 3000,
      DATABASE_URL: 'file:./data/app.db',
      NATS_URL: 'nats://127.0.0.1:4222',
      NATS_STREAM: 'HONO_OUTBOX',
      EVENTS_SUBJECT_PREFIX: 'hono-outbox',
      RELAY_POLL_MS: 100,
      RELAY_BATCH: 500,
      RELAY_MAX_IN_FLIGHT: 256,
      RELAY_MAX_ATTEMPTS: 5,
      ROLES: ['api', 'relay', 'consumers'],
    });
  });

  it('leaves credentials unset by default', () => {
    const config = parseConfig({});
    for (const key of ['NATS_CREDS', 'NATS_TOKEN', 'NATS_USER', 'NATS_PASSWORD', 'ADMIN_TOKEN', 'DATABASE_AUTH_TOKEN'] as const) {
      expect(config[key]).toBeUndefined();
    }
  });

  it('an empty string counts as unset and falls back to the default', () => {
    expect(parseConfig({ PORT: '', ROLES: '', RELAY_BATCH: '' })).toMatchObject({
      PORT: 3000,
      ROLES: ['api', 'relay', 'consumers'],
      RELAY_BATCH: 500,
    });
  });

  it('reads only the record it is given, never process.env', () => {
    vi.stubEnv('PORT', 'abc');
    vi.stubEnv('RELAY_BATCH', '7');
    expect(parseConfig({})).toMatchObject({ PORT: 3000, RELAY_BATCH: 500 });
  });

  it('parses given values into numbers and role lists', () => {
    const config = parseConfig({ PORT: '8080', RELAY_BATCH: '50', ROLES: ' relay , api ', MIGRATE_ON_START: 'false' });
    expect(config).toMatchObject({ PORT: 8080, RELAY_BATCH: 50, ROLES: ['relay', 'api'], MIGRATE_ON_START: false });
  });

  it('retentions are durations in ms, s, m, h or d, parsed to milliseconds, with defaults of 24h and 7d', () => {
    expect(parseConfig({})).toMatchObject({ IDEMPOTENCY_RETENTION: 86_400_000, OUTBOX_RETENTION: 604_800_000 });
    expect(parseConfig({ IDEMPOTENCY_RETENTION: '90m', OUTBOX_RETENTION: '2d' })).toMatchObject({
      IDEMPOTENCY_RETENTION: 5_400_000,
      OUTBOX_RETENTION: 172_800_000,
    });
    expect(parseConfig({ IDEMPOTENCY_RETENTION: '60000ms', OUTBOX_RETENTION: '3600s' })).toMatchObject({
      IDEMPOTENCY_RETENTION: 60_000,
      OUTBOX_RETENTION: 3_600_000,
    });
  });

  it('ignores variables it does not know', () => {
    expect(() => parseConfig({ SOMETHING_ELSE: '!!!', PATH: '/bin' })).not.toThrow();
  });
});

describe('config - invalid values', () => {
  const bad: Array<[string, string]> = [
    ['PORT', 'abc'],
    ['PORT', '-1'],
    ['PORT', '65536'],
    ['PORT', '80.5'],
    ['PORT', ' 80'],
    ['DATABASE_URL', 'postgres://localhost/app'],
    // a database SQLite would open as temporary or in memory: every order and event gone with the process
    ['DATABASE_URL', 'file:'],
    ['DATABASE_URL', 'file://'],
    ['DATABASE_URL', 'file:///'],
    ['DATABASE_URL', 'file:./data/'],
    ['DATABASE_URL', 'file::memory:'],
    ['CONSUMER_DATABASE_URL_TEMPLATE', 'file:./data/{name}/'],
    ['HOST', 'not a host name!'],
    ['HOST', '256.1.1.1'],
    ['HOST', 'host_with_underscore'],
    ['HOST', '[::1]'],
    ['HOST', '1::2::3'],
    ['DATABASE_BUSY_TIMEOUT_MS', 'soon'],
    ['HTTP_KEEP_ALIVE_TIMEOUT_MS', '999'],
    ['HTTP_KEEP_ALIVE_TIMEOUT_MS', '255001'],
    ['NATS_URL', 'http://127.0.0.1:4222'],
    ['NATS_URL', 'nats://a b'],
    ['NATS_STREAM', 'EVENTS.ALL'],
    ['EVENTS_SUBJECT_PREFIX', 'events.>'],
    ['EVENTS_SUBJECT_PREFIX', 'events..x'],
    ['RELAY_POLL_MS', '0'],
    ['RELAY_BATCH', '0'],
    ['RELAY_BATCH', '10001'],
    ['RELAY_MAX_IN_FLIGHT', 'many'],
    ['RELAY_MAX_ATTEMPTS', '0'],
    ['RELAY_MAX_BACKOFF_MS', '1'],
    ['STREAM_DUPLICATE_WINDOW_MS', '10'],
    ['ROLES', 'api,web'],
    ['ROLES', ' , '],
    ['CONSUMERS', 'reporting,bad.name'],
    ['CONSUMER_DATABASE_URL_TEMPLATE', 'file:./data/consumer.db'],
    ['INBOX_RETENTION_DAYS', '0'],
    ['IDEMPOTENCY_RETENTION', '24'],
    ['IDEMPOTENCY_RETENTION', '30s'],
    ['IDEMPOTENCY_RETENTION', '99999999999999999d'],
    ['OUTBOX_RETENTION', '1w'],
    ['OUTBOX_RETENTION', '3651d'],
    ['ADMIN_TOKEN', 'short'],
    ['LOG_LEVEL', 'verbose'],
    ['MIGRATE_ON_START', 'yes'],
  ];

  it.each(bad)('%s=%j throws a ConfigError with one line naming the variable', (name, value) => {
    const error = configErrorOf({ [name]: value });
    expect(error.message).not.toMatch(/[\r\n]/);
    expect(error.message).toMatch(new RegExp(`\\b${name}\\b`));
  });

  it('takes IPv4 and IPv6 addresses and host names as HOST', () => {
    for (const host of ['0.0.0.0', '127.0.0.1', '::', '::1', 'fe80::1%eth0', 'localhost', 'api-1.internal.example.com'])
      expect(parseConfig({ HOST: host }).HOST).toBe(host);
  });

  it('names the bad variable, not a valid neighbour, when only one is bad', () => {
    const error = configErrorOf({ PORT: '8080', RELAY_BATCH: 'lots', NATS_STREAM: 'EVENTS' });
    expect(error.message).toMatch(/\bRELAY_BATCH\b/);
    expect(error.message).not.toMatch(/\bPORT\b|\bNATS_STREAM\b/);
  });
});

describe('config - start-up', () => {
  it('node entry with PORT=abc exits 2 with one stderr line naming PORT and no stack trace', async () => {
    using tmp = createTempDir();
    const { cmd, args } = runtimeCommand('node', 'src/entry/node.ts');
    const res = await runToExit(cmd, args, {
      PORT: 'abc',
      DATABASE_URL: `file:${join(tmp.dir, 'data', 'app.db')}`,
      ROLES: 'api',
      LOG_LEVEL: 'warn',
    });
    expect(res.code, res.stderr).toBe(2);
    const lines = res.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/\bPORT\b/);
    expect(res.stderr).not.toMatch(/^\s+at /m);
    expect(res.stdout).toBe('');
    // It stopped before touching the database.
    expect(readdirSync(tmp.dir)).toEqual([]);
  });
});

describe('config - secrets', () => {
  it('never echoes a secret or a URL back in the error message', () => {
    for (const [name, value] of [
      ['ADMIN_TOKEN', 'hunter2'],
      ['NATS_URL', 'nats://user:s3cret@host:4222 x'],
    ] as const) {
      let message = '';
      try {
        parseConfig({ [name]: value });
      } catch (error) {
        message = (error as Error).message;
      }
      expect(message).toContain(name);
      expect(message).not.toContain(name === 'ADMIN_TOKEN' ? 'hunter2' : 's3cret');
    }
  });
});
