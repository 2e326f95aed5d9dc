// Dead-letter pages are keyset ranges over (dead_at, event_id), resumed from the `next` cursor of the page before.
// dead_at is what the subscriber wrote (epoch ms), or anything a script wrote: before 1970, a real, an integer past
// 2^53, a text, a blob. Paging one row at a time through the cursor as it travels over HTTP (encoded, decoded) must
// visit every row exactly once, in SQLite's order, and end.
import { describe, expect, it } from 'vitest';
import { pageDeadLetters, type DeadLetterCursor } from '../../src/inbox/dead-letters.ts';
import { decodeCursor, encodeCursor } from '../../src/ops/dead-letter-cursor.ts';
import { createSubscriberDb } from '../support/consumer.ts';

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

    const seen: string[] = [];
    let after: DeadLetterCursor | undefined;
    for (let page = 0; page <= KEYS.length + 1; page++) {
      const { items, next } = await pageDeadLetters(sdb.db, 'balances', { limit: 1, after });
      seen.push(...items.map((d) => d.eventId));
      if (!next) break;
      after = decodeCursor(encodeCursor(next));
      expect(after, `the cursor after ${items[0]?.eventId}`).toBeDefined();
    }
    expect(seen).toEqual(expected);
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
});
