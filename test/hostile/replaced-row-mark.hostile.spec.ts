// The payload_validated mark against a row replaced in place. `outbox_payload_edited` clears the mark on an UPDATE of
// the payload (or a compared column), but `INSERT OR REPLACE` / `REPLACE INTO` is a DELETE and an INSERT to SQLite, so
// no UPDATE trigger fires. appendToOutbox never stores a row at or below the highest seq ever given, so a row stored
// there cannot be one it wrote: `outbox_row_restored_unmarked` clears its mark, and the relay checks it in full. A
// database whose sqlite_sequence lost its 'outbox' row (deleted by a repair script, lost in a copy or .recover) cannot
// tell a restored row from a new one: the triggers then take the row for a restored one.
import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { ownStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** Rewrites the first row by REPLACE INTO under its own seq, every column copied (the mark too), its payload's end replaced by `tail`. */
async function replaceFirstRow(t: TestDb, tail: string): Promise<string> {
  await t.client.execute({
    sql: `REPLACE INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts,
        occurred_at, available_at, aggregate_hash, partition, payload_validated)
      SELECT seq, id, aggregate_type, aggregate_id, message_type, substr(payload, 1, length(payload) - 2) || ?, headers, status, attempts,
        occurred_at, available_at, aggregate_hash, partition, payload_validated FROM outbox WHERE seq = 1`,
    args: [tail],
  });
  return String((await t.client.execute('SELECT payload FROM outbox WHERE seq = 1')).rows[0]!.payload);
}

/** Drains the outbox with one attempt per row: how many messages the stream holds, and the first row's mark and status. */
async function drainOnce(t: TestDb, name: string) {
  const stream = ownStream(name);
  const { mark } = (await t.client.execute('SELECT payload_validated AS mark FROM outbox WHERE seq = 1')).rows[0]!;
  await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
  const { state } = await (await jetstreamManager(nats().nc)).streams.info(stream.name);
  const row = (await t.client.execute('SELECT status FROM outbox WHERE seq = 1')).rows[0]!;
  return { mark: Number(mark), messagesInStream: state.messages, status: row.status };
}

describe('relay row check - a row replaced in place under its own seq', () => {
  it('a row whose payload was rewritten by REPLACE INTO under its seq is checked in full before it is published (its broken JSON is not published)', {
    timeout: 30_000,
  }, async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(1);
    // the payload's data cut short and patched into text that is no JSON
    const payload = await replaceFirstRow(t, 'X"}}');
    expect(() => JSON.parse(payload)).toThrow();
    expect(await drainOnce(t, 'REPLACED')).toEqual({ mark: 0, messagesInStream: 0, status: 'failed' });
  });

  it('a row rewritten by REPLACE INTO under its own seq after sqlite_sequence lost its outbox entry is checked in full, and its invalid event is not published', {
    timeout: 30_000,
  }, async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(1);
    await t.client.execute("DELETE FROM sqlite_sequence WHERE name = 'outbox'");
    // the data gains a field its strict schema refuses
    const payload = await replaceFirstRow(t, ',"injected":true}}');
    expect(() => t.deps.registry.parse(JSON.parse(payload))).toThrow();
    expect(await drainOnce(t, 'NOSEQ')).toEqual({ mark: 0, messagesInStream: 0, status: 'failed' });
  });
});
