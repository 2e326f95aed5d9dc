// The dead-letter admin routes over a subscriber's dead_letters rows that a script, a restore or another tool
// stored with odd columns. The listing must show the other rows (and the odd one) rather than answer 500 for the
// whole page; replay-all must not fail as a whole because of one row. Real libSQL files, real nats-server (its own).
import { createClient } from '@libsql/client';
import { describe, expect, it } from 'vitest';
import { createSubscriberDb } from '../support/consumer.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { creditedEvent } from '../support/accounts.ts';

const nats = useNats();
const TOKEN = 'test-admin-token-0123456789';
const auth = { Authorization: `Bearer ${TOKEN}` };
const base = '/admin/subscribers/balances/dead-letters';

async function startService() {
  const stream = await freshStream(nats().nc, 'IOR');
  const sdb = { balances: await createSubscriberDb({ subscriber: 'balances' }), audit: await createSubscriberDb({ subscriber: 'audit' }) };
  const s = await createTestService(
    { ROLES: 'api,consumers', NATS_URL: nats().url, ...streamEnv(stream), CONSUMER_MAX_DELIVER: '2', ADMIN_TOKEN: TOKEN },
    { modules: fixtureModules, openSubscriberDb: async (name) => createClient({ url: sdb[name as keyof typeof sdb].url, timeout: 5000 }) },
  );
  const close = async () => {
    await s.close();
    sdb.balances.close();
    sdb.audit.close();
  };
  return { ...s, sdb, close, [Symbol.asyncDispose]: close };
}

type Service = Awaited<ReturnType<typeof startService>>;

/** A dead letter of `balances` as a script would store it: a valid event, with the given odd columns. */
async function scriptDeadLetter(s: Service, id: string, cols: { headers?: unknown; deliveries?: unknown; deadAt?: unknown; payload?: unknown }) {
  const e = { ...creditedEvent({ owner: id }), eventId: id };
  await s.sdb.balances.client.execute({
    sql: `INSERT INTO dead_letters (event_id, consumer, subject, headers, payload, error, deliveries, dead_at) VALUES (?, 'balances', ?, ?, ?, 'by script', ?, ?)`,
    args: [
      id,
      `x.account.${id}`,
      (cols.headers ?? '{}') as never,
      (cols.payload ?? JSON.stringify(e)) as never,
      (cols.deliveries ?? 2) as never,
      (cols.deadAt ?? 1000) as never,
    ],
  });
}

const ODD: Array<[string, Parameters<typeof scriptDeadLetter>[2]]> = [
  ['text in dead_at', { deadAt: 'yesterday' }],
  ['a dead_at past 2^53 (nanoseconds)', { deadAt: BigInt(Date.now()) * 1_000_000n }],
  ['a dead_at past the range of a Date', { deadAt: 8.7e15 }],
  ['deliveries past 2^53', { deliveries: 2n ** 60n }],
  ['headers that are not JSON', { headers: 'not json' }],
  ['headers stored as a BLOB', { headers: new Uint8Array([123, 125]) }],
];

const ids = (text: string) => (JSON.parse(text) as { items: Array<{ eventId: string }> }).items.map((i) => i.eventId).sort();

describe('dead-letter admin routes - odd dead_letters rows', () => {
  it.each(ODD)('GET dead-letters answers 200 listing an ordinary dead letter and one with %s', async (_what, cols) => {
    await using s = await startService();
    await scriptDeadLetter(s, 'ordinary', {});
    await scriptDeadLetter(s, 'odd', cols);
    const res = await s.app.request(base, { headers: auth });
    const text = await res.text();
    expect(res.status, text).toBe(200); // not a 500 for the whole page because of one row
    expect(ids(text)).toEqual(['odd', 'ordinary']);
  });

  it.each(ODD.filter(([what]) => !what.includes('Date') && !what.startsWith('text')))(
    'POST replay-all replays the ordinary dead letter (200) while another has %s',
    async (_what, cols) => {
      await using s = await startService();
      await scriptDeadLetter(s, 'ordinary', {});
      await scriptDeadLetter(s, 'odd', cols);
      const res = await s.app.request(`${base}/replay-all`, { method: 'POST', headers: auth });
      const text = await res.text();
      expect(res.status, text).toBe(200);
      expect((JSON.parse(text) as { replayed: string[] }).replayed).toContain('ordinary');
    },
  );

  it('GET dead-letters lists a dead letter whose dead_at is negative (before 1970), which /admin/subscribers counts', async () => {
    await using s = await startService();
    await scriptDeadLetter(s, 'ordinary', {});
    await scriptDeadLetter(s, 'before-1970', { deadAt: -86_400_000 });
    const count = await (await s.app.request('/admin/subscribers', { headers: auth })).json();
    expect(count).toMatchObject({ items: expect.arrayContaining([{ name: 'balances', deadLetters: 2 }]) });
    const res = await s.app.request(base, { headers: auth });
    const text = await res.text();
    expect(res.status, text).toBe(200);
    expect(ids(text)).toEqual(['before-1970', 'ordinary']); // the listing starts at dead_at -1: the row is never shown nor replayed by replay-all
  });
});
