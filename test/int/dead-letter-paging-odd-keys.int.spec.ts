// Dead-letter pages are keyset ranges over (dead_at, event_id), resumed from the `next` cursor of the page before.
// dead_at is what the subscriber wrote (epoch ms), or anything a script wrote: before 1970, a real, an integer past
// 2^53, a text, a blob. Paging one row at a time through the cursor as it travels over HTTP (encoded, decoded) must
// visit every row exactly once, in SQLite's order, and end.
import { describe, expect, it } from 'vitest';
import { pageDeadLetters, type DeadLetter, type DeadLetterCursor } from '../../src/inbox/dead-letters.ts';
import { decodeCursor, encodeCursor } from '../../src/ops/dead-letter-cursor.ts';
import { createSubscriberDb, type SubscriberDb } from '../support/consumer.ts';

const KEYS: Array<[string, unknown]> = [
  ['nanos', 2n ** 60n],
  ['text', 'yesterday'],
  ['blob', new Uint8Array([0, 255, 1])],
  ['real', 1764650000123.5],
  ['ms-1', 1764650000000],
  ['ms-2', 1764650000000],
  ['before-1970', -86_400_000],
  ['far-negative', -(2n ** 60n)],
  ['zero', 0],
];

/**
 * `label` of each of balances' dead letters, paging one at a time through the cursor as it travels over HTTP (encoded,
 * decoded); gives up after `count` + 1 pages, so a cursor that pages the same row again ends with too many labels.
 */
async function pageOneAtATime(sdb: SubscriberDb, count: number, label: (d: DeadLetter) => string): Promise<string[]> {
  const seen: string[] = [];
  let after: DeadLetterCursor | undefined;
  for (let page = 0; page <= count + 1; page++) {
    const { items, next } = await pageDeadLetters(sdb.db, 'balances', { limit: 1, after });
    seen.push(...items.map(label));
    if (!next) break;
    after = decodeCursor(encodeCursor(next));
    expect(after, `the cursor after ${items[0] && label(items[0])}`).toBeDefined();
  }
  return seen;
}

describe('dead letters - paging over odd times of death', () => {
  it('pages of one through the encoded cursor visit every dead letter exactly once, in (dead_at, event_id) order, and end', async () => {
    using sdb = await createSubscriberDb({ subscriber: 'balances' });
    for (const [id, deadAt] of KEYS) {
      await sdb.client.execute({
        sql: `INSERT INTO dead_letters (event_id, consumer, subject, headers, payload, error, deliveries, dead_at) VALUES (?, 'balances', 's', '{}', '{}', 'e', 1, ?)`,
        args: [id, deadAt as never],
      });
    }
    const expected = (await sdb.client.execute("SELECT event_id FROM dead_letters WHERE consumer = 'balances' ORDER BY dead_at, event_id")).rows.map((r) =>
      String(r.event_id),
    );
    expect(expected).toHaveLength(KEYS.length);

    expect(await pageOneAtATime(sdb, KEYS.length, (d) => d.eventId)).toEqual(expected);
    const all = await pageDeadLetters(sdb.db, 'balances', { limit: 100 });
    // only the times a Date can show come back as times
    expect(Object.fromEntries(all.items.map((d) => [d.eventId, d.deadAt]))).toEqual({
      nanos: null,
      text: null,
      blob: null,
      real: null,
      'ms-1': 1764650000000,
      'ms-2': 1764650000000,
      'before-1970': -86_400_000,
      'far-negative': null,
      zero: 0,
    });
  });

  it('pages of one visit every dead letter once and end when event ids and text times of death hold bytes that are no UTF-8, blobs or other text', async () => {
    using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const bytes = (...b: number[]) => new Uint8Array(b);
    // [label, event_id, dead_at]; a Uint8Array is stored as text with those bytes, a Blob-wrapped one as a blob
    const rows: Array<[string, unknown, unknown]> = [
      ['ff-1', bytes(0x61, 0xff, 0x31), 1000],
      ['ff-2', bytes(0x61, 0xff, 0x32), 1000],
      ['e9', bytes(0x61, 0xe9), 1000],
      ['accented', 'aé', 1000],
      ['plain', 'a', 1000],
      ['nul', bytes(0x61, 0x00, 0xff), 1000],
      ['blob-id', { blob: bytes(0x61, 0xff) }, 1000],
      ['text-at-ff', 'x1', bytes(0x79, 0xff)],
      ['text-at-e9', 'x2', bytes(0x79, 0xe9)],
      ['text-at', 'x3', 'y'],
    ];
    for (const [label, id, deadAt] of rows) {
      const arg = (v: unknown) =>
        v instanceof Uint8Array
          ? { sql: 'CAST(? AS TEXT)', value: v }
          : typeof v === 'object' && v
            ? { sql: '?', value: (v as { blob: Uint8Array }).blob }
            : { sql: '?', value: v };
      const [i, d] = [arg(id), arg(deadAt)];
      await sdb.client.execute({
        sql: `INSERT INTO dead_letters (event_id, consumer, subject, headers, payload, error, deliveries, dead_at) VALUES (${i.sql}, 'balances', 's', '{}', '{}', ?, 1, ${d.sql})`,
        args: [i.value as never, label, d.value as never],
      });
    }
    // labels in SQLite's order, read without reading the odd text (which would abort the process)
    const expected = (await sdb.client.execute("SELECT error FROM dead_letters WHERE consumer = 'balances' ORDER BY dead_at, event_id")).rows.map((r) =>
      String(r.error),
    );
    expect(await pageOneAtATime(sdb, rows.length, (d) => d.error)).toEqual(expected);
    const shown = Object.fromEntries((await pageDeadLetters(sdb.db, 'balances', { limit: 100 })).items.map((d) => [d.error, d.eventId]));
    expect(shown).toMatchObject({ 'ff-1': 'a\ufffd1', e9: 'a\ufffd', accented: 'aé', nul: 'a\u0000\ufffd', 'blob-id': 'a\ufffd' });
  });
});
