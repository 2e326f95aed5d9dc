// Dead letters whose dead_at a script stored as ±Infinity (a REAL: `1e999`, `-1e999`). Paging one at a time, in
// process and through the encoded cursor, and eachDeadLetter (replay-all, the CLI) must visit every row exactly
// once, in SQLite's (dead_at, event_id) order, and end.
import { describe, expect, it } from 'vitest';
import { eachDeadLetter, pageDeadLetters, type DeadLetterCursor } from '../../src/inbox/dead-letters.ts';
import { decodeCursor, encodeCursor } from '../../src/ops/dead-letter-cursor.ts';
import { createSubscriberDb } from '../support/consumer.ts';

type Sdb = Awaited<ReturnType<typeof createSubscriberDb>>;

async function seed(sdb: Sdb, rows: Array<[string, string]>): Promise<string[]> {
  for (const [id, deadAtSql] of rows) {
    await sdb.client.execute({
      sql: `INSERT INTO dead_letters (event_id, consumer, subject, headers, payload, error, deliveries, dead_at) VALUES (?, 'balances', 's', '{}', '{}', 'e', 1, ${deadAtSql})`,
      args: [id],
    });
  }
  const rs = await sdb.client.execute("SELECT event_id FROM dead_letters WHERE consumer = 'balances' ORDER BY dead_at, event_id");
  return rs.rows.map((r) => String(r.event_id));
}

async function walk(sdb: Sdb, overHttp: boolean): Promise<string[]> {
  const seen: string[] = [];
  let after: DeadLetterCursor | undefined;
  for (let page = 0; page < 20; page++) {
    const { items, next } = await pageDeadLetters(sdb.db, 'balances', { limit: 1, after });
    seen.push(...items.map((d) => d.eventId));
    if (!next) return seen;
    after = overHttp ? decodeCursor(encodeCursor(next)) : next;
    if (!after) return [...seen, '<own cursor rejected>'];
  }
  return [...seen, '<no end>'];
}

const NEG_INF: Array<[string, string]> = [
  ['a', '-1e999'],
  ['b', '1000'],
];
const POS_INF: Array<[string, string]> = [
  ['a', '1000'],
  ['b', '1e999'],
  ['c', '1e999'],
];

describe('dead letters - a dead_at of ±Infinity', () => {
  it.each([
    ['the first page includes a dead letter whose dead_at is -Infinity', NEG_INF, false],
    ['pages of one resume after a dead letter whose dead_at is +Infinity', POS_INF, false],
    ['the encoded next cursor after a +Infinity dead_at decodes and resumes', POS_INF, true],
  ] as const)('%s', async (_name, rows, encoded) => {
    using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const expected = await seed(sdb, rows);
    expect(await walk(sdb, encoded)).toEqual(expected);
  });

  it('eachDeadLetter (replay-all, the CLI) visits every dead letter with ±Infinity times of death', async () => {
    using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const expected = await seed(sdb, [...NEG_INF, ['c', '1e999'], ['d', '1e999']]);
    const seen: string[] = [];
    for await (const d of eachDeadLetter(sdb.db, 'balances', 1)) seen.push(d.eventId);
    expect(seen).toEqual(expected);
  });
});
