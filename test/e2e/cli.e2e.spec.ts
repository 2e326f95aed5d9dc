import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { useCliWorkspaces } from '../support/cli-workspace.ts';
import { runtimeCommand, runToExit } from '../support/process.ts';

/** Runs `check` on every item, at most `n` at a time (each command line is its own process; they do not share state). */
async function eachWithin<T>(items: readonly T[], n: number, check: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) await check(items[next++]!);
    }),
  );
}

const workspace = useCliWorkspaces();

const parked = (id: string, aggregateId: string) =>
  `('${id}', 'order', '${aggregateId}.{partition}', 'order.gone.v1', '{}', 'failed', 5, 'type order.gone.v1 is not registered', 0, 0)`;

describe('cli - outbox commands', () => {
  it('lists failed rows with their error and re-queues one by id, then all', async () => {
    const w = workspace();
    expect((await w.cli(['outbox:stats'])).code).toBe(0); // creates and migrates the database
    const db = w.open(w.env.DATABASE_URL);
    await db.execute(
      `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, attempts, last_error, occurred_at, available_at) VALUES ${parked('f1', 'a')}, ${parked('f2', 'b')}`,
    );

    const stats = await w.cli(['outbox:stats']);
    expect(JSON.parse(stats.stdout)).toEqual({ pending: 0, failed: 2, sent: 0, oldestPendingAgeMs: 0 });
    const failed = await w.cli(['outbox:failed']);
    expect(failed.code).toBe(0);
    expect(failed.stdout).toContain('f1');
    expect(failed.stdout).toContain('type order.gone.v1 is not registered');

    const one = await w.cli(['outbox:retry-failed', '--id', 'f1']);
    expect(one.stdout).toContain('1 row(s) re-queued');
    const missing = await w.cli(['outbox:retry-failed', '--id', 'f1']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('no failed outbox row with id f1');
    expect((await w.cli(['outbox:retry-failed', '--all'])).stdout).toContain('1 row(s) re-queued');
    // due at once; their attempts keep counting, so a row that fails again is parked again at once
    const rows = await db.execute('SELECT id, status, attempts, available_at FROM outbox ORDER BY id');
    expect(rows.rows.map((r) => [r.id, r.status, Number(r.attempts), Number(r.available_at)])).toEqual([
      ['f1', 'pending', 5, 0],
      ['f2', 'pending', 5, 0],
    ]);
  });

  it('compacts only old sent rows and prints progress and totals', async () => {
    const w = workspace();
    await w.cli(['outbox:stats']);
    const db = w.open(w.env.DATABASE_URL);
    const values = Array.from({ length: 5 }, (_, i) => `('s${i}', 'order', 'a${i}', 'order.placed.v1', '{}', 'sent', 0, 0, 1000)`).join(', ');
    await db.execute(
      `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at) VALUES ${values}, ('p1', 'order', 'p', 'order.placed.v1', '{}', 'pending', 0, 0, NULL)`,
    );
    const out = await w.cli(['outbox:compact', '--older-than', '7d', '--batch', '2']);
    expect(out.code).toBe(0);
    expect(out.stdout).toContain('batch 3: 5 sent row(s) deleted so far');
    expect(out.stdout).toContain('deleted 5 sent row(s)');
    const left = await db.execute('SELECT id FROM outbox');
    expect(left.rows.map((r) => r.id)).toEqual(['p1']);
  });

  it('bad arguments print the usage and exit 2 without touching the database', async () => {
    const w = workspace();
    for (const args of [
      [],
      ['outbox:nope'],
      ['outbox:compact', '--older-than', '7x'],
      ['outbox:retry-failed'],
      ['outbox:failed', '--limit', '0'],
      ['inbox:replay', '--consumer', 'nobody', '--all'],
    ]) {
      const res = await w.cli(args);
      expect(res.code, args.join(' ')).toBe(2);
      expect(res.stderr).toContain('usage: npm run cli');
    }
    expect(existsSync(w.env.DATABASE_URL.slice('file:'.length))).toBe(false);
    expect(existsSync(w.env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'nobody').slice('file:'.length))).toBe(false);
  });
});

describe('cli - inbox commands', () => {
  it('lists dead letters, refuses to replay an unknown id, and compacts old inbox rows', async () => {
    const w = workspace();
    expect((await w.cli(['inbox:dead-letters', '--consumer', 'reporting'])).stdout).toContain('no dead letters for reporting');
    const db = w.open(w.env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'reporting'));
    await db.execute(
      `INSERT INTO dead_letters (event_id, consumer, subject, payload, error, deliveries, dead_at) VALUES ('e1', 'reporting', 'hono-outbox.order.x', 'not json', 'payload is not JSON', 1, 0)`,
    );
    await db.execute(
      `INSERT INTO inbox (event_id, consumer, message_type, received_at) VALUES ('old', 'reporting', 'order.placed.v1', 0), ('new', 'reporting', 'order.placed.v1', ${Date.now()})`,
    );

    const list = await w.cli(['inbox:dead-letters', '--consumer', 'reporting']);
    expect(list.stdout).toContain('e1');
    expect(list.stdout).toContain('payload is not JSON');
    const replay = await w.cli(['inbox:replay', '--consumer', 'reporting', '--id', 'e1']);
    expect(replay.code).toBe(1); // still not JSON: the dead letter stays
    expect(JSON.parse(replay.stdout).failed[0].eventId).toBe('e1');
    expect(Number((await db.execute('SELECT count(*) FROM dead_letters')).rows[0]![0])).toBe(1);

    const compact = await w.cli(['inbox:compact', '--consumer', 'reporting', '--older-than', '30d']);
    expect(compact.stdout).toContain('deleted 1 inbox row(s) of reporting');
    expect((await db.execute('SELECT event_id FROM inbox')).rows.map((r) => r.event_id)).toEqual(['new']);
  });
});

/** A workspace whose service and reporting databases hold old and recent rows of every compactable kind. */
async function populated() {
  const w = workspace();
  expect((await w.cli(['outbox:stats'])).code).toBe(0);
  expect((await w.cli(['inbox:dead-letters', '--consumer', 'reporting'])).code).toBe(0);
  const app = w.open(w.env.DATABASE_URL);
  const reporting = w.open(w.env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'reporting'));
  const now = Date.now();
  await app.execute(
    `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at) VALUES ('s-old', 'order', 'a', 'order.placed.v1', '{}', 'sent', 0, 0, 1000), ('s-new', 'order', 'b', 'order.placed.v1', '{}', 'sent', 0, 0, ${now})`,
  );
  const keys = Array.from({ length: 5 }, (_, i) => `('old-${i}', 'f', 201, '{}', NULL, ${1000 + i})`).concat(`('new', 'f', 201, '{}', NULL, ${now})`);
  await app.execute(`INSERT INTO idempotency_keys (key, fingerprint, status_code, response_body, location, created_at) VALUES ${keys.join(', ')}`);
  await reporting.execute(
    `INSERT INTO inbox (event_id, consumer, message_type, received_at) VALUES ('old', 'reporting', 'order.placed.v1', 0), ('hour', 'reporting', 'order.placed.v1', ${now - 3_600_000}), ('new', 'reporting', 'order.placed.v1', ${now})`,
  );
  const rows = async () => ({
    outbox: (await app.execute('SELECT id FROM outbox ORDER BY id')).rows.map((r) => String(r.id)),
    keys: (await app.execute('SELECT key FROM idempotency_keys ORDER BY key')).rows.map((r) => String(r.key)),
    inbox: (await reporting.execute('SELECT event_id FROM inbox ORDER BY event_id')).rows.map((r) => String(r.event_id)),
  });
  return { ...w, rows };
}

describe('cli - operator commands cannot break guarantees', () => {
  it('inbox:compact below the duplicate window plus the redelivery horizon is refused with exit 2 and one line, deleting nothing; --force overrides', async () => {
    const w = await populated();
    const before = await w.rows();
    const refused = await w.cli(['inbox:compact', '--consumer', 'reporting', '--older-than', '1ms']);
    expect(refused.code, refused.stderr).toBe(2);
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    expect(refused.stderr).toContain('Refusing inbox retention of 1 ms: it must be at least 1200000 ms');
    expect(refused.stderr).toContain('--force');
    expect(await w.rows()).toEqual(before);
    // 30 minutes is above the 20-minute floor of the defaults: allowed
    const allowed = await w.cli(['inbox:compact', '--consumer', 'reporting', '--older-than', '30m']);
    expect(allowed.code, allowed.stderr).toBe(0);
    expect((await w.rows()).inbox).toEqual(['new']);
    const forced = await w.cli(['inbox:compact', '--consumer', 'reporting', '--older-than', '1ms', '--force']);
    expect(forced.code, forced.stderr).toBe(0);
    expect((await w.rows()).inbox).toEqual([]);
  });

  it('idempotency:compact forgets keys older than IDEMPOTENCY_RETENTION in batches, and refuses a shorter cutoff unless --force', async () => {
    const w = await populated();
    const done = await w.cli(['idempotency:compact', '--batch', '2']);
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout).toContain('batch 3: 5 key(s) deleted so far');
    expect(done.stdout).toContain('deleted 5 idempotency key(s)');
    expect((await w.rows()).keys).toEqual(['new']);

    const refused = await w.cli(['idempotency:compact', '--older-than', '1h'], { IDEMPOTENCY_RETENTION: '2h' });
    expect(refused.code).toBe(2);
    expect(refused.stderr.trim().split('\n')).toHaveLength(1);
    expect(refused.stderr).toContain('IDEMPOTENCY_RETENTION (2h)');
    const forced = await w.cli(['idempotency:compact', '--older-than', '0ms', '--force']);
    expect(forced.code, forced.stderr).toBe(0);
    expect((await w.rows()).keys).toEqual([]);
  });

  it('extra or unknown arguments, repeated options and out-of-range values print the usage and exit 2, with no stack trace and no change to the databases', async () => {
    const w = await populated();
    const before = await w.rows();
    const bad = [
      ['outbox:stats', 'extra'],
      ['outbox:compact', 'now'],
      ['outbox:compact', '--older-than', '99999999999999999d'],
      ['outbox:compact', '--older-than', '3651d'],
      ['outbox:compact', '--older-than', '1d', '--older-than', '0ms'],
      ['outbox:compact', '--older-than='],
      ['outbox:compact', '--batch', '0'],
      ['outbox:compact', '--batch', '1e9'],
      ['outbox:compact', '--batch', '1000000000'],
      ['outbox:compact', '--batch', '2', '--batch', '3'],
      ['outbox:compact', '--vacuum'],
      ['outbox:failed', '--limit', '99999999999999999999'],
      ['outbox:retry-failed', '--all', '--all'],
      ['outbox:retry-failed', '--all=yes'],
      ['idempotency:compact', '--force', '--force'],
      ['idempotency:compact', '--batch', '-1'],
      ['inbox:compact', '--consumer', 'reporting', 'extra'],
      ['inbox:compact', '--consumer', 'reporting', '--consumer', 'notifications'],
      ['inbox:compact', '--consumer', 'reporting', '--older-than', '99999999999999999d', '--force'],
      ['inbox:compact', '--consumer', 'reporting', '--batch', '0', '--force'],
      ['inbox:replay', '--consumer', 'reporting', '--all', 'extra'],
      ['toString'],
      ['__proto__'],
    ];
    await eachWithin(bad, 3, async (args) => {
      const res = await w.cli(args);
      expect(res.code, `${args.join(' ')}\n${res.stderr}`).toBe(2);
      expect(res.stderr, args.join(' ')).toContain('usage: npm run cli');
      expect(res.stderr, args.join(' ')).not.toMatch(/^\s+at /m);
      expect(res.stdout, args.join(' ')).toBe('');
    });
    expect(await w.rows()).toEqual(before);
  }, 180_000);
});

describe('relay and consume entries - bad command lines', () => {
  it('extra arguments, repeated options and out-of-range values print the usage and exit 2 before opening anything', async () => {
    const w = workspace();
    const env = { ...w.env, NATS_URL: 'nats://127.0.0.1:1' };
    const runs: Array<[string, string[]]> = [
      ['src/entry/relay.ts', ['extra']],
      ['src/entry/relay.ts', ['--time-limit', '1s', '--time-limit', '2s']],
      ['src/entry/relay.ts', ['--time-limit', '99999999999999999d']],
      ['src/entry/relay.ts', ['--time-limit', '30d']],
      ['src/entry/relay.ts', ['--time-limit', '0ms']],
      ['src/entry/relay.ts', ['--max-messages', '0']],
      ['src/entry/relay.ts', ['--max-messages', '1e9']],
      ['src/entry/relay.ts', ['--max-messages', '5', '--max-messages', '6']],
      ['src/entry/relay.ts', ['--batch', '10']],
      ['src/entry/consume.ts', []],
      ['src/entry/consume.ts', ['reporting', 'extra']],
      ['src/entry/consume.ts', ['reporting', '--batch', '1']],
    ];
    await eachWithin(runs, 3, async ([entry, args]) => {
      const { cmd, args: base } = runtimeCommand('node', entry);
      const res = await runToExit(cmd, [...base, ...args], env, 60_000);
      const label = `${entry} ${args.join(' ')}`;
      expect(res.code, `${label}\n${res.stderr}`).toBe(2);
      expect(res.stderr, label).toMatch(/usage: npm run (relay|consume)/);
      expect(res.stderr, label).not.toMatch(/^\s+at /m);
    });
    expect(existsSync(w.env.DATABASE_URL.slice('file:'.length))).toBe(false);
    expect(existsSync(w.env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'reporting').slice('file:'.length))).toBe(false);
  }, 180_000);
});

describe('consume entry - start-up refusals', () => {
  it('refuses an inbox retention shorter than the duplicate window plus the redelivery horizon, naming both numbers', async () => {
    const w = workspace();
    const { cmd, args } = runtimeCommand('node', 'src/entry/consume.ts');
    const res = await runToExit(cmd, [...args, 'reporting'], {
      ...w.env,
      NATS_URL: 'nats://127.0.0.1:1',
      INBOX_RETENTION_DAYS: '1',
      STREAM_DUPLICATE_WINDOW_MS: String(2 * 86_400_000),
    });
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('86400000');
    expect(res.stderr).toMatch(/17[0-9]{7}/); // 2 days + 10 × (30 s + 30 s) = 173 400 000 ms
    expect(res.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('an unknown subscriber name prints the usage and exits 2', async () => {
    const w = workspace();
    const { cmd, args } = runtimeCommand('node', 'src/entry/consume.ts');
    const res = await runToExit(cmd, [...args, 'nobody'], w.env);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('Unknown subscriber "nobody"');
  });
});
