// The relay addresses rows by seq as JavaScript numbers, and the driver refuses integers past 2^53 as numbers. A script
// or restore that stores an outbox row under such a seq (or moves one there) would make every fetch of the relay
// fail, and move the AUTOINCREMENT counter past 2^53 for every later command: the outbox refuses it instead, and
// nothing of the statement is stored. Real libSQL file, real relay, real nats-server.
import { describe, expect, it } from 'vitest';
import { accountCommands, creditedEvent } from '../support/accounts.ts';
import { eventually } from '../support/eventually.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const PAST_SAFE = 2n ** 53n + 10n;

describe('outbox - a seq past 2^53', () => {
  it('an INSERT or an UPDATE that would give an outbox row a seq past 2^53 is refused with a clear error, stores nothing, and the relay goes on publishing', async () => {
    const stream = await freshStream(nats().nc, 'SEQB');
    await using s = await createTestService({ ROLES: 'api,relay', NATS_URL: nats().url, ...streamEnv(stream) });
    const accounts = accountCommands(s.deps);
    const [first] = await accounts.openMany(1);
    await eventually(async () => Number((await s.client.execute("SELECT count(*) FROM outbox WHERE status = 'sent'")).rows[0]![0]) === 1, {
      what: 'the first row sent',
    });

    const e = creditedEvent({ owner: 'script' });
    await expect(
      s.client.execute({
        sql: `INSERT INTO outbox (seq, id, aggregate_type, aggregate_id, message_type, payload, status, attempts, occurred_at, available_at)
              VALUES (?, ?, 'account', ?, ?, ?, 'pending', 0, ?, 0)`,
        args: [PAST_SAFE, e.eventId, e.aggregateId, e.type, JSON.stringify(e), Date.parse(e.occurredAt)],
      }),
    ).rejects.toThrow(/seq/);
    await expect(s.client.execute({ sql: 'UPDATE outbox SET seq = ? WHERE aggregate_id = ?', args: [PAST_SAFE, first!] })).rejects.toThrow(/seq/);
    expect(Number((await s.client.execute({ sql: 'SELECT count(*) FROM outbox WHERE id = ?', args: [e.eventId] })).rows[0]![0])).toBe(0);
    const seqs = (await s.client.execute('SELECT max(seq) AS high FROM outbox')).rows[0]!;
    expect(Number(seqs.high)).toBeLessThan(1000);
    expect(Number((await s.client.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'")).rows[0]![0])).toBeLessThan(1000);

    await accounts.openMany(3);
    await eventually(async () => Number((await s.client.execute("SELECT count(*) FROM outbox WHERE status = 'sent'")).rows[0]![0]) === 4, {
      timeoutMs: 10_000,
      what: 'the later rows sent',
    });
    const stats = await s.app.request('/outbox/stats');
    expect(stats.status).toBe(200);
    expect(await stats.json()).toMatchObject({ pending: 0, sent: 4 });
  });
});
