// outbox_row_restored_unmarked (migration 0008) clears payload_validated on a row stored at or below "the highest seq
// ever given", read from sqlite_sequence. A database whose sqlite_sequence lost its 'outbox' row (deleted by a repair
// script, lost in a copy or .recover) cannot tell a restored row from a new one: the triggers then take the row for a
// restored one, so a row replaced under its own seq is checked in full and its invalid event is not published.
import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { ownStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('relay row check - a row replaced in place while sqlite_sequence has no outbox entry', () => {
  it('a row rewritten by REPLACE INTO under its own seq after sqlite_sequence lost its outbox entry is checked in full, and its invalid event is not published', {
    timeout: 30_000,
  }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('NOSEQ');
    await accountCommands(t.deps).openMany(1);
    await t.client.execute("DELETE FROM sqlite_sequence WHERE name = 'outbox'");
    // the data gains a field its strict schema refuses; every other column is copied, the mark too
    await t.client.execute(`REPLACE INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts,
        occurred_at, available_at, aggregate_hash, partition, payload_validated)
      SELECT seq, id, aggregate_type, aggregate_id, message_type, substr(payload, 1, length(payload) - 2) || ',"injected":true}}', headers, status, attempts,
        occurred_at, available_at, aggregate_hash, partition, payload_validated FROM outbox WHERE seq = 1`);
    const stored = (await t.client.execute('SELECT payload, payload_validated FROM outbox WHERE seq = 1')).rows[0]!;
    expect(() => t.deps.registry.parse(JSON.parse(String(stored.payload)))).toThrow();
    const mark = Number(stored.payload_validated);

    await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
    const { state } = await (await jetstreamManager(nats().nc)).streams.info(stream.name);
    const row = (await t.client.execute('SELECT status FROM outbox WHERE seq = 1')).rows[0]!;
    expect({ mark, messagesInStream: state.messages, status: row.status }).toEqual({ mark: 0, messagesInStream: 0, status: 'failed' });
  });
});
