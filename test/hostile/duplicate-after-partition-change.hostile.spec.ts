// A partition-count change (applyPartitionCount) and the relay's duplicate check: a row the relay published (its PubAck lost, so the
// relay counted a failed try and, at its last attempt, parked it) keeps its event in the stream on the subject of its
// partition under the old count. With nothing pending the count changes and the parked row moves to its new
// partition; re-queued within the duplicate window, the relay's copy on the new subject is answered `duplicate`. The
// stored copy is the same aggregate's subject under another partition token, which subscribers read before they move
// to the new count (docs/production.md), so the row is sent, not failed and parked again.
// Real libSQL file, nats-server the test starts.
import { describe, expect, it } from 'vitest';
import { eventSubject } from '../../src/nats/stream-settings.ts';
import { applyPartitionCount } from '../../src/outbox/outbox-partitions.ts';
import { requeueFailed } from '../../src/outbox/failed-rows.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { publishAsAKilledRelay, relayDeps } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('relay - re-queued parked row after a partition-count change', () => {
  it('a row whose own earlier publish the stream holds under the old partition subject is marked sent as a duplicate, not failed and parked', {
    timeout: 30_000,
  }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('PCHANGE');
    await createStream(nats().nc, stream);
    await accountCommands(t.deps).open('ann');
    // the relay's publish reached the stream, its PubAck did not: the relay parked the row at its last attempt
    await publishAsAKilledRelay(t, nats().nc, stream);
    await t.client.execute("UPDATE outbox SET status = 'failed', attempts = 5, last_error = 'publish timed out' WHERE seq = 1");
    const before = (await t.client.execute('SELECT aggregate_id, aggregate_hash, partition FROM outbox WHERE seq = 1')).rows[0]!;
    // a count under which the row moves (the account's id is random: under some counts its partition stays the same)
    const count = [5, 7, 9, 11, 13].find((n) => Number(before.aggregate_hash) % n !== Number(before.partition))!;
    // nothing pending: the count may change; then the operator re-queues the parked row
    await applyPartitionCount(t.deps.writer, count);
    await t.deps.writer.write((tx) => requeueFailed(tx, undefined));
    const after = (await t.client.execute('SELECT partition FROM outbox WHERE seq = 1')).rows[0]!;
    expect(Number(after.partition)).not.toBe(Number(before.partition));

    // RELAY_MAX_ATTEMPTS 5 with back-off up to 30 s parks a row well inside the 10-minute duplicate window; here faster
    const deps = relayDeps(t, nats().url, { stream, partitions: count, settings: { maxAttempts: 2 } });
    for (let run = 0; run < 10; run++) {
      await createRelay(deps).run({ untilIdle: true, timeLimitMs: 5000 });
      const { rows } = await t.client.execute("SELECT count(*) AS n FROM outbox WHERE status = 'pending'");
      if (Number(rows[0]!.n) === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const row = (await t.client.execute('SELECT status, last_error FROM outbox WHERE seq = 1')).rows[0]!;
    const subjects = (await readStream(nats().nc, stream)).map((m) => m.subject);
    // the stream holds the row's own event (its bytes, its id) from the relay's own publish: a duplicate of it
    expect(subjects).toEqual([eventSubject(stream.prefix, 'account', String(before.aggregate_id), Number(before.partition))]);
    expect({ status: row.status, lastError: row.status === 'sent' ? null : row.last_error }).toEqual({ status: 'sent', lastError: null });
  });
});
