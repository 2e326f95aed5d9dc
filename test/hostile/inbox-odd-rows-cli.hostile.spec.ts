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
