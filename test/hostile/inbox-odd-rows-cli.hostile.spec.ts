// The CLI's inbox commands over a subscriber database holding rows a script, a restore or another tool stored with
// odd columns. One odd row must not make a listing or a replay of the others fail as a whole. Real libSQL files,
// real CLI processes (no broker needed).
import { describe, expect, it } from 'vitest';
import { useCliWorkspaces } from '../support/cli-workspace.ts';

const workspace = useCliWorkspaces();

/** An ordinary placed-order dead letter and an odd one with the given columns, in a fresh workspace's reporting database. */
async function withDeadLetters(odd: { headers?: unknown; deliveries?: unknown; deadAt?: unknown }) {
  const w = workspace();
  expect((await w.cli(['inbox:dead-letters', '--consumer', 'reporting'])).code).toBe(0); // creates and migrates it
  const db = w.open(w.env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'reporting'));
  const ins = `INSERT INTO dead_letters (event_id, consumer, subject, headers, payload, error, deliveries, dead_at) VALUES (?, 'reporting', 'hono-outbox.order.x', ?, 'not json', 'payload is not JSON', ?, ?)`;
  await db.execute({ sql: ins, args: ['ordinary', '{}', 1, 1000] });
  await db.execute({ sql: ins, args: ['odd', (odd.headers ?? '{}') as never, (odd.deliveries ?? 1) as never, (odd.deadAt ?? 2000) as never] });
  return { w, db };
}

const ODD: Array<[string, { headers?: unknown; deliveries?: unknown; deadAt?: unknown }]> = [
  ['a dead_at past 2^53 (nanoseconds)', { deadAt: BigInt(Date.now()) * 1_000_000n }],
  ['text in dead_at', { deadAt: 'yesterday' }],
  ['headers that are not JSON', { headers: 'not json' }],
];

describe('cli inbox:dead-letters - odd dead_letters rows', () => {
  it.each(ODD)('lists an ordinary dead letter and one with %s, exit 0, no stack trace', async (_what, odd) => {
    const { w } = await withDeadLetters(odd);
    const list = await w.cli(['inbox:dead-letters', '--consumer', 'reporting']);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toContain('ordinary');
    expect(list.stdout).toContain('odd');
  });
});

describe('cli inbox:dead-letters and inbox:replay --all - text holding bytes that are no UTF-8', () => {
  it('lists and tries the ordinary dead letter and one whose event id, headers and error hold Latin-1 bytes (shown as U+FFFD), no crash', async () => {
    const { w, db } = await withDeadLetters({});
    const latin1 = (text: string) => new Uint8Array([...new TextEncoder().encode(text), 0xe9]);
    // the driver aborts the process (exit 134) on such text read as text
    await db.execute({
      sql: `INSERT INTO dead_letters (event_id, consumer, subject, headers, payload, error, deliveries, dead_at)
            VALUES (CAST(? AS TEXT), 'reporting', 'hono-outbox.order.x', CAST(? AS TEXT), 'not json', CAST(? AS TEXT), 1, 3000)`,
      args: [latin1('latin1-'), new Uint8Array([...new TextEncoder().encode('{"Event-Type":"order.placed.v'), 0xe9, 0x22, 0x7d]), latin1('bad ')],
    });
    const list = await w.cli(['inbox:dead-letters', '--consumer', 'reporting']);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toContain('ordinary');
    expect(list.stdout).toContain('latin1-\ufffd');
    const replay = await w.cli(['inbox:replay', '--consumer', 'reporting', '--all']);
    expect(() => JSON.parse(replay.stdout), `stdout: ${replay.stdout}\nstderr: ${replay.stderr}`).not.toThrow();
    const { failed } = JSON.parse(replay.stdout) as { failed: Array<{ eventId: string; error: string }> };
    expect(failed.map((f) => f.eventId)).toContain('ordinary');
    // no id can name it (a replay deletes the dead letter by id): it is reported, not applied, and stays
    expect(failed.find((f) => f.eventId === 'latin1-\ufffd')?.error).toMatch(/event_id holds no UTF-8 text/);
    expect(Number((await db.execute("SELECT count(*) AS n FROM dead_letters WHERE event_id LIKE 'latin1-%'")).rows[0]!.n)).toBe(1);
  });

  it('lists more than a page of dead letters whose ids hold bytes that sort above U+FFFD, once each, and exits', async () => {
    const { w, db } = await withDeadLetters({});
    // 101 more (one more than the CLI's page), each id 'a', the byte FF and three digits, one time of death: a cursor
    // that carried the id as shown (a U+FFFD, EF BF BD) would resume before them and page the same rows for ever
    for (let i = 0; i < 101; i++) {
      await db.execute({
        sql: `INSERT INTO dead_letters (event_id, consumer, subject, headers, payload, error, deliveries, dead_at)
              VALUES (CAST(? AS TEXT), 'reporting', 'hono-outbox.order.x', '{}', 'not json', 'payload is not JSON', 1, 5000)`,
        args: [new Uint8Array([0x61, 0xff, ...new TextEncoder().encode(String(i).padStart(3, '0'))])],
      });
    }
    const list = await w.cli(['inbox:dead-letters', '--consumer', 'reporting']);
    expect(list.code, list.stderr).toBe(0);
    const ids = list.stdout
      .split('\n')
      .filter((l) => l.startsWith('a\ufffd'))
      .map((l) => l.split(' ')[0]);
    expect(ids).toEqual(Array.from({ length: 101 }, (_, i) => `a\ufffd${String(i).padStart(3, '0')}`));
  });
});

describe('cli inbox:replay --all - odd dead_letters rows', () => {
  it.each(ODD.filter(([what]) => !what.startsWith('text')))(
    'still tries the ordinary dead letter and prints its report when another has %s',
    async (_what, odd) => {
      const { w } = await withDeadLetters(odd);
      const replay = await w.cli(['inbox:replay', '--consumer', 'reporting', '--all']);
      // both stay failing (their payload is not JSON): exit 1 with a JSON report naming the ordinary one, not a crash
      expect(() => JSON.parse(replay.stdout), `stdout: ${replay.stdout}\nstderr: ${replay.stderr}`).not.toThrow();
      expect((JSON.parse(replay.stdout) as { failed: Array<{ eventId: string }> }).failed.map((f) => f.eventId)).toContain('ordinary');
    },
  );
});

describe('cli inbox:compact - odd inbox rows', () => {
  it('deletes the old rows and exits 0 while the inbox holds received_at values that are text, a BLOB, past 2^53, or past a Date', async () => {
    const w = workspace();
    expect((await w.cli(['inbox:dead-letters', '--consumer', 'reporting'])).code).toBe(0);
    const db = w.open(w.env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'reporting'));
    const ins = `INSERT INTO inbox (event_id, consumer, message_type, received_at) VALUES (?, 'reporting', 'order.placed.v1', ?)`;
    for (const [id, at] of [
      ['old', 0],
      ['text', 'yesterday'],
      ['blob', new Uint8Array([1])],
      ['nanos', BigInt(Date.now()) * 1_000_000n],
      ['far', 8.7e15],
      ['neg', -(2n ** 62n)],
      ['new', Date.now()],
    ] as const)
      await db.execute({ sql: ins, args: [id, at as never] });
    const compact = await w.cli(['inbox:compact', '--consumer', 'reporting', '--older-than', '30d']);
    expect(compact.code, compact.stderr).toBe(0);
    const left = (await db.execute('SELECT event_id FROM inbox ORDER BY event_id')).rows.map((r) => r.event_id);
    expect(left).not.toContain('old');
    expect(left).toContain('new');
  });
});
