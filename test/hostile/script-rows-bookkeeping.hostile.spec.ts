// Outbox rows whose bookkeeping columns were set by hand (an operator parking a poison event, a script re-queueing
// with a date text): the relay must never publish a later event of an aggregate before an earlier unsent one, and
// must not leave a pending row unread, nor hold its aggregate for ever without a trace. Real libSQL file, real
// nats-server, the relay as the service runs it (leases over 16 partitions).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createLocalClient } from '../../src/db/local-client.ts';
import { prepareLocalDatabase } from '../../src/db/open-database.ts';
import { type Journal, migrationsFolder } from '../support/migrations-folder.ts';
import { requeueFailed } from '../../src/outbox/failed-rows.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTempDir, createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps, runRelay } from '../support/relay.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** The smallest 64-bit integer: the one value SQLite's abs() cannot negate. */
const INT64_MIN = '-9223372036854775808';

describe('relay - a row parked by hand (status failed, attempts still 0)', () => {
  it('holds back the later events of its aggregate, which are published after it once it is re-queued', { timeout: 30_000 }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('HANDPARK');
    const accounts = accountCommands(t.deps);
    const acc = await accounts.open('first');
    // an operator stops the opened event by hand before any relay ran: the status a parked row has
    await t.client.execute("UPDATE outbox SET status = 'failed', last_error = 'held by an operator' WHERE aggregate_id = ?", [acc]);
    await accounts.deposit(acc, 100);
    await drainOutbox(relayDeps(t, nats().url, { stream }));
    // the operator lets it go again
    await t.deps.writer.write((tx) => requeueFailed(tx, undefined));
    await drainOutbox(relayDeps(t, nats().url, { stream }));
    const types = (await readStream(nats().nc, stream)).filter((m) => m.event.aggregateId === acc).map((m) => m.event.type);
    expect(types).toEqual(['account.opened.v1', 'account.credited.v1']);
  });

  it('counts one attempt, and once re-queued is published by a relay that kept running, before the later events of its aggregate', {
    timeout: 30_000,
  }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('HANDPARKRUN');
    const accounts = accountCommands(t.deps);
    const acc = await accounts.open('first');
    await t.client.execute("UPDATE outbox SET status = 'failed', last_error = 'held by an operator' WHERE aggregate_id = ?", [acc]);
    expect((await t.client.execute('SELECT attempts FROM outbox WHERE aggregate_id = ?', [acc])).rows[0]!.attempts).toBe(1);
    await accounts.deposit(acc, 100);
    // other aggregates keep the relay's floor moving above the parked row while it waits
    const others = await accounts.openMany(30);
    const running = runRelay(relayDeps(t, nats().url, { stream }));
    try {
      await expect.poll(async () => (await readStream(nats().nc, stream)).length, { timeout: 10_000 }).toBe(others.length);
      await t.deps.writer.write((tx) => requeueFailed(tx, undefined));
      await expect
        .poll(async () => (await readStream(nats().nc, stream)).filter((m) => m.event.aggregateId === acc).map((m) => m.event.type), { timeout: 10_000 })
        .toEqual(['account.opened.v1', 'account.credited.v1']);
    } finally {
      await running.stop();
    }
  });
});

describe('relay - a retried row whose available_at a script set to a date text', () => {
  it('is stored as due now, published, and the later events of its aggregate follow', { timeout: 30_000 }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('DATETEXT');
    const accounts = accountCommands(t.deps);
    const acc = await accounts.open('first');
    // "retry it now", written as SQLite's own time text, which the INTEGER column would keep as text: stored as due now
    await t.client.execute("UPDATE outbox SET attempts = 1, available_at = datetime('now') WHERE aggregate_id = ?", [acc]);
    expect((await t.client.execute('SELECT typeof(available_at) AS t, available_at FROM outbox')).rows[0]).toMatchObject({ t: 'integer', available_at: 0 });
    await accounts.deposit(acc, 100);
    await drainOutbox(relayDeps(t, nats().url, { stream }));
    const rows = (await t.client.execute('SELECT message_type, status FROM outbox ORDER BY seq')).rows.map(
      (r) => `${String(r.message_type)}:${String(r.status)}`,
    );
    const published = (await readStream(nats().nc, stream)).map((m) => m.event.type);
    expect({ rows, published }).toEqual({
      rows: ['account.opened.v1:sent', 'account.credited.v1:sent'],
      published: ['account.opened.v1', 'account.credited.v1'],
    });
  });
});

describe('outbox rows written by hand - what the triggers of migration outbox_script_edits keep', () => {
  it('the rows appendToOutbox stores in a fresh database, the first ones included, keep their mark and their partition hash', async () => {
    await using t = await createTestDb();
    expect((await t.client.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'")).rows[0]?.seq).toBe(0);
    await accountCommands(t.deps).openMany(3);
    const rows = (await t.client.execute('SELECT payload_validated AS mark, aggregate_hash IS NOT NULL AS hashed FROM outbox ORDER BY seq')).rows;
    expect(rows.map((r) => [r.mark, r.hashed])).toEqual([
      [1, 1],
      [1, 1],
      [1, 1],
    ]);
  });

  it('a row inserted as parked with no attempt counts one, and a due time that is no number or no time is stored as due now', async () => {
    await using t = await createTestDb();
    const accounts = accountCommands(t.deps);
    const acc = await accounts.open('first');
    // a restore script copies the row back under a new id, parked by hand and due "now" as a date text
    await t.client.execute(
      `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, partition)
       SELECT 'restored-' || id, aggregate_type, aggregate_id, message_type, payload, headers, 'failed', 0, occurred_at, datetime('now'), partition
       FROM outbox WHERE aggregate_id = ?`,
      [acc],
    );
    const row = (await t.client.execute("SELECT attempts, typeof(available_at) AS t, available_at FROM outbox WHERE id LIKE 'restored-%'")).rows[0]!;
    expect({ attempts: row.attempts, t: row.t, availableAt: row.available_at }).toEqual({ attempts: 1, t: 'integer', availableAt: 0 });
    // a number beyond any time is no time either; a time far ahead is one, and delays the retry as asked
    await t.client.execute("UPDATE outbox SET available_at = 1e300 WHERE id LIKE 'restored-%'");
    expect((await t.client.execute("SELECT available_at FROM outbox WHERE id LIKE 'restored-%'")).rows[0]!.available_at).toBe(0);
    // the smallest 64-bit integer, which abs() cannot negate: stored as due now, the write does not fail
    await t.client.execute(`UPDATE outbox SET available_at = ${INT64_MIN} WHERE id LIKE 'restored-%'`);
    expect((await t.client.execute("SELECT available_at FROM outbox WHERE id LIKE 'restored-%'")).rows[0]!.available_at).toBe(0);
    await t.client.execute("UPDATE outbox SET available_at = 32503680000000 WHERE id LIKE 'restored-%'");
    expect((await t.client.execute("SELECT available_at FROM outbox WHERE id LIKE 'restored-%'")).rows[0]!.available_at).toBe(32503680000000);
  });

  it('rows of a database migrated from the release before are fixed by the migration: parked rows count an attempt, due times that are no number or no time become due now', async () => {
    using tmp = createTempDir();
    // the migrations up to the one before outbox_script_edits
    const { folder } = migrationsFolder(tmp.dir, []);
    const journalPath = join(folder, 'meta', '_journal.json');
    const full = readFileSync(journalPath, 'utf8');
    const journal = JSON.parse(full) as Journal;
    const edits = journal.entries.findIndex((e) => /_outbox_script_edits$/.test(e.tag));
    expect(edits).toBeGreaterThan(0);
    writeFileSync(journalPath, JSON.stringify({ ...journal, entries: journal.entries.slice(0, edits) }, null, 2));
    const client = createLocalClient({ url: `file:${join(tmp.dir, 'app.db')}`, timeout: 5000 });
    try {
      await prepareLocalDatabase(client);
      await migrateDatabase(client, folder);
      const insert = (id: string, status: string, attempts: number, availableAt: string) =>
        client.execute({
          sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, attempts, occurred_at, available_at)
                VALUES (?, 'account', 'acc-1', 'account.opened.v1', '{}', ?, ?, 0, ${availableAt})`,
          args: [id, status, attempts],
        });
      await insert('parked-by-hand', 'failed', 0, '0');
      await insert('due-as-text', 'pending', 1, "datetime('now')");
      await insert('due-long-ago', 'pending', 1, INT64_MIN);
      expect((await client.execute("SELECT typeof(available_at) FROM outbox WHERE id = 'due-as-text'")).rows[0]![0]).toBe('text');
      writeFileSync(journalPath, full);
      await migrateDatabase(client, folder);
      const rows = (await client.execute('SELECT id, attempts, typeof(available_at) AS t, available_at FROM outbox ORDER BY seq')).rows.map((r) => ({
        id: r.id,
        attempts: r.attempts,
        t: r.t,
        availableAt: r.available_at,
      }));
      expect(rows).toEqual([
        { id: 'parked-by-hand', attempts: 1, t: 'integer', availableAt: 0 },
        { id: 'due-as-text', attempts: 1, t: 'integer', availableAt: 0 },
        { id: 'due-long-ago', attempts: 1, t: 'integer', availableAt: 0 },
      ]);
    } finally {
      client.close();
    }
  });
});
