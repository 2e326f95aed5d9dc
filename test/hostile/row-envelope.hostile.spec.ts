// Hostile rows against the relay's cheap row check (src/outbox/row-message.ts): a payload that begins with the
// canonical envelope appendToOutbox writes but says something else once parsed. Before the check became a prefix
// comparison, every row was parsed and validated in full and its columns compared with the parsed event, so such a
// row was refused (retried, then parked) instead of published. No broker is needed: headerFieldsOf is what decides
// whether prepare() publishes the stored bytes as they are; it trusts the prefix only on rows marked payload_validated,
// and the last test checks in a libSQL database that only appendToOutbox's rows keep that mark.
import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { requeueFailed } from '../../src/outbox/failed-rows.ts';
import { markSent, recordFailure } from '../../src/outbox/relay-store.ts';
import { headerFieldsOf, type StoredEvent } from '../../src/outbox/row-message.ts';
import { accountCommands, openedEvent } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { storedRow } from '../support/stored-row.ts';

const registry = registryOf(fixtureModules);

/** The columns appendToOutbox stores for `event`, with `payload` as the stored text, as a script writes them: unmarked. */
const rowWith = (event: ReturnType<typeof openedEvent>, payload: string): StoredEvent => storedRow(event, { payload, payload_validated: 0 });

/** What a subscriber gets from the published bytes (JSON.parse keeps the last of duplicate keys). */
const asSubscriberSees = (row: StoredEvent) => JSON.parse(new TextDecoder().decode(row.payload)) as Record<string, unknown>;

describe('relay row check - a row is published only when its payload, parsed, is the event its columns and headers describe', () => {
  it('refuses a canonical-looking payload whose parsed aggregateId differs from the column that names its subject', () => {
    const event = openedEvent({ accountId: 'acc-x' });
    const canonical = JSON.stringify(registry.parse(event));
    // the same envelope, and after `data` a second aggregateId: JSON.parse (subscribers) reads "acc-y"
    const row = rowWith(event, `${canonical.slice(0, -1)},"aggregateId":"acc-y"}`);
    expect(asSubscriberSees(row).aggregateId).toBe('acc-y');
    // the subject and Aggregate-Id header would say acc-x: per-aggregate order is kept on the wrong aggregate
    expect(() => headerFieldsOf(row, registry)).toThrow();
  });

  it('refuses a canonical-looking payload whose parsed type or eventId differs from its columns (Event-Type, Nats-Msg-Id)', () => {
    const event = openedEvent();
    const canonical = JSON.stringify(registry.parse(event));
    for (const tail of [',"type":"account.credited.v1"', ',"eventId":"evt-someone-else"', ',"aggregateVersion":99']) {
      const row = rowWith(event, `${canonical.slice(0, -1)}${tail}}`);
      expect(() => headerFieldsOf(row, registry), tail).toThrow();
    }
  });

  it('refuses a canonical-looking payload whose data does not pass the registry, or that is not JSON at all', () => {
    const event = openedEvent();
    const canonical = JSON.stringify(registry.parse(event));
    const head = canonical.slice(0, canonical.indexOf('"data":') + '"data":'.length);
    for (const payload of [`${head}{"accountId":42}}`, `${head}{"no":"owner"}}`, `${head}}`, `${head}{"accountId":"a","owner":"b"}}}`]) {
      expect(() => headerFieldsOf(rowWith(event, payload), registry), payload).toThrow();
    }
  });
});

describe('relay row check - the mark that lets the relay trust a payload past its envelope', () => {
  it("is set on the rows appendToOutbox stores, kept through the relay's and operators' writes, and cleared by any change to the payload or a column the check compares", async () => {
    await using t = await createTestDb();
    await accountCommands(t.deps).openMany(8);
    const marks = async () => (await t.client.execute('SELECT payload_validated FROM outbox ORDER BY seq')).rows.map((r) => Number(r.payload_validated));
    expect(await marks()).toEqual([1, 1, 1, 1, 1, 1, 1, 1]);
    // the writes the relay and operators make: a failure recorded, a row parked and re-queued, rows marked sent, a new partition
    const firstTwo = (await t.client.execute('SELECT seq, id FROM outbox WHERE seq IN (1, 2) ORDER BY seq')).rows.map((r) => ({
      seq: Number(r.seq),
      id: String(r.id),
    }));
    await t.deps.writer.write(async (tx) => {
      await recordFailure(tx, { seq: 1, attempts: 0 }, 'rejected', 0, 1);
      await requeueFailed(tx, undefined);
      await markSent(tx, firstTwo, Date.now());
    });
    await t.client.execute('UPDATE outbox SET partition = (partition + 1) % 16, aggregate_hash = aggregate_hash WHERE seq = 3');
    expect(await marks()).toEqual([1, 1, 1, 1, 1, 1, 1, 1]);
    // an edit of any column the check compares, even to the value it had, or of the payload, unmarks the row; so does
    // an edit that tries to keep the mark
    const edits = [
      'UPDATE outbox SET payload = substr(payload, 1, length(payload) - 1) || \',"aggregateId":"acc-y"}\' WHERE seq = 2',
      "UPDATE outbox SET aggregate_id = 'acc-y' WHERE seq = 3",
      'UPDATE outbox SET id = id WHERE seq = 4',
      "UPDATE outbox SET message_type = 'account.credited.v1' WHERE seq = 5",
      "UPDATE outbox SET aggregate_type = 'order' WHERE seq = 6",
      'UPDATE outbox SET occurred_at = occurred_at + 1, payload_validated = 1 WHERE seq = 7',
    ];
    for (const sql of edits) await t.client.execute(sql);
    expect(await marks()).toEqual([1, 0, 0, 0, 0, 0, 0, 1]);
  });
});
