// The ops HTTP surface over outbox rows a script, a restore or another tool stored with odd columns — rows the relay
// is built to survive (relay-store.ts reads `attempts` and `occurred_at` through guards, and parks a row without a
// count "to retry once the row is checked"). The endpoints an operator checks such rows with must survive them too.
// Real libSQL file, real relay, real nats-server (its own, per file).
import { describe, expect, it } from 'vitest';
import { creditedEvent } from '../support/accounts.ts';
import { eventually } from '../support/eventually.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const TOKEN = 'test-admin-token-0123456789';
const auth = { Authorization: `Bearer ${TOKEN}` };

type Service = Awaited<ReturnType<typeof createTestService>>;

/** Stores one outbox row as a script would: a valid registered event, with the given attempts/occurred_at/status columns. */
async function scriptRow(s: Service, owner: string, columns: { attempts: unknown; occurredAt: unknown; status?: string }): Promise<string> {
  const e = creditedEvent({ owner });
  await s.client.execute({
    sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, attempts, last_error, occurred_at, available_at)
          VALUES (?, 'account', ?, ?, ?, ?, ?, 'by script', ?, 0)`,
    args: [e.eventId, e.aggregateId, e.type, JSON.stringify(e), columns.status ?? 'pending', columns.attempts as never, columns.occurredAt as never],
  });
  return e.eventId;
}

describe('ops endpoints - outbox rows with odd columns', () => {
  it('GET /admin/outbox/failed answers 200 and lists a row the relay parked for an operator to check (its occurred_at is no time), next to an ordinary failed row', async () => {
    const stream = await freshStream(nats().nc, 'ADVF');
    await using s = await createTestService({ ROLES: 'api,relay', ADMIN_TOKEN: TOKEN, NATS_URL: nats().url, ...streamEnv(stream) });
    const ordinary = await scriptRow(s, 'ordinary', { attempts: 5, occurredAt: 0, status: 'failed' });
    // text in both columns: the relay parks it at once ("the attempts column holds no count … retry it once the row is checked")
    const odd = await scriptRow(s, 'odd', { attempts: 'n/a', occurredAt: 'yesterday' });
    await eventually(async () => (await s.client.execute({ sql: "SELECT 1 FROM outbox WHERE id = ? AND status = 'failed'", args: [odd] })).rows.length > 0, {
      timeoutMs: 10_000,
      what: 'the relay to park the odd row',
    });

    const res = await s.app.request('/admin/outbox/failed', { headers: auth });
    const text = await res.text();
    expect(res.status, text).toBe(200); // not a 500 for the whole page because of one row's time
    const items = (JSON.parse(text) as { items: Array<{ id: string; attempts: unknown; occurredAt: unknown }> }).items;
    expect(items.map((i) => i.id)).toEqual([ordinary, odd]);
    // a column that holds no time comes back null (parking gave the odd row a count), the ordinary row's as they are
    expect(items[0]).toMatchObject({ attempts: 5, occurredAt: new Date(0).toISOString() });
    expect(items[1]).toMatchObject({ attempts: expect.any(Number), occurredAt: null });
  });

  it('GET /admin/outbox/failed answers 200 with a failed row whose occurred_at is an integer past 2^53 or past the range of a Date, or whose attempts are past 2^53, showing those columns as null', async () => {
    const stream = await freshStream(nats().nc, 'ADVG');
    await using s = await createTestService({ ROLES: 'api', ADMIN_TOKEN: TOKEN, NATS_URL: nats().url, ...streamEnv(stream) });
    const odd: Array<{ attempts: unknown; occurredAt: unknown; expected: { attempts: number | null; occurredAt: null } }> = [
      { attempts: 5, occurredAt: 8.7e15, expected: { attempts: 5, occurredAt: null } },
      { attempts: 5, occurredAt: BigInt(Date.now()) * 1_000_000n, expected: { attempts: 5, occurredAt: null } },
      // a count past 2^53, which the driver refuses as a number, and text in the time
      { attempts: 2n ** 60n, occurredAt: 'soon', expected: { attempts: null, occurredAt: null } },
    ];
    for (const { attempts, occurredAt, expected } of odd) {
      const id = await scriptRow(s, `far-${occurredAt}`, { attempts, occurredAt, status: 'failed' });
      const res = await s.app.request('/admin/outbox/failed', { headers: auth });
      const text = await res.text();
      expect(res.status, `attempts ${attempts}, occurred_at ${occurredAt}: ${text}`).toBe(200);
      expect((JSON.parse(text) as { items: Array<{ id: string }> }).items.find((i) => i.id === id)).toMatchObject(expected);
      await s.client.execute({ sql: 'DELETE FROM outbox WHERE id = ?', args: [id] });
    }
  });

  it('while a pending row has a nanosecond occurred_at (past 2^53), /outbox/stats and /status.json answer 200 and /metrics still carries the backlog gauges', async () => {
    const stream = await freshStream(nats().nc, 'ADVS');
    // the api role alone: the relay runs elsewhere (or the broker is down), so the row stays pending
    await using s = await createTestService({ ROLES: 'api', ADMIN_TOKEN: TOKEN, NATS_URL: nats().url, ...streamEnv(stream) });
    await scriptRow(s, 'nanos', { attempts: 0, occurredAt: BigInt(Date.now()) * 1_000_000n });

    const stats = await s.app.request('/outbox/stats');
    expect(stats.status, await stats.clone().text()).toBe(200); // the driver refuses the integer as a number: the stats must not read it unguarded
    // the row's age is unknown: it is counted as pending and left out of the oldest age
    expect(await stats.json()).toMatchObject({ pending: 1, oldestPendingAgeMs: 0 });
    const status = await s.app.request('/status.json');
    expect(status.status, await status.text()).toBe(200);
    const metrics = await (await s.app.request('/metrics')).text();
    // a sample, not only the HELP/TYPE lines: an alert on the backlog must see it
    expect(metrics).toMatch(/^outbox_pending_messages(\{[^}]*\})? 1$/m);
  });
});
