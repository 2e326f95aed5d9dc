// The payload_validated mark against a row replaced in place. `outbox_payload_edited` clears the mark on an UPDATE of
// the payload (or a compared column), but `INSERT OR REPLACE` / `REPLACE INTO` is a DELETE and an INSERT to SQLite, so
// no UPDATE trigger fires. appendToOutbox never stores a row at or below the highest seq ever given, so a row stored
// there cannot be one it wrote: `outbox_row_restored_unmarked` clears its mark, and the relay checks it in full.
import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { ownStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('relay row check - a row replaced in place under its own seq', () => {
  it('a row whose payload was rewritten by REPLACE INTO under its seq is checked in full before it is published (its broken JSON is not published)', {
    timeout: 30_000,
  }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('REPLACED');
    await accountCommands(t.deps).openMany(1);
    // the payload's data cut short and patched into text that is no JSON, every other column copied, the mark too
    await t.client.execute(`REPLACE INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts,
        occurred_at, available_at, aggregate_hash, partition, payload_validated)
      SELECT seq, id, aggregate_type, aggregate_id, message_type, substr(payload, 1, length(payload) - 2) || 'X"}}', headers, status, attempts,
        occurred_at, available_at, aggregate_hash, partition, payload_validated FROM outbox WHERE seq = 1`);
    const stored = (await t.client.execute('SELECT payload, payload_validated FROM outbox WHERE seq = 1')).rows[0]!;
    expect(() => JSON.parse(String(stored.payload))).toThrow();

    await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
    const { state } = await (await jetstreamManager(nats().nc)).streams.info(stream.name);
    const row = (await t.client.execute('SELECT status, payload_validated FROM outbox WHERE seq = 1')).rows[0]!;
    expect({ messagesInStream: state.messages, status: row.status }).toEqual({ messagesInStream: 0, status: 'failed' });
  });
});
