// Outbox rows written by a script (not by appendToOutbox) whose numeric columns hold what no release writes: a time in
// nanoseconds, a count past 2^53, text in an INTEGER column. The relay reads each such column of every pending row,
// so one row must never take the relay down: it is published (its headers come from its parsed payload) or parked,
// and every other row keeps flowing. Real libSQL file, real nats-server.
import { describe, expect, it } from 'vitest';
import { openedEvent } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { insertScriptRow } from '../support/stored-row.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** Drains the outbox; the relay's rejection (a crash of the relay process) comes back as its message. */
const drain = (t: TestDb, stream: ReturnType<typeof ownStream>) =>
  drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 2 } })).then(
    (summary) => ({ crashed: undefined, summary }),
    (error: unknown) => ({ crashed: String(error), summary: undefined }),
  );

describe('relay - a script row with out-of-range numbers never crashes the relay', () => {
  const HUGE: Array<[string, Record<string, unknown>]> = [
    ['occurred_at in nanoseconds (past 2^53)', { occurred_at: 1_767_225_600_000_000_000n }],
    ['attempts past 2^53', { attempts: 2n ** 60n, available_at: 0 }],
    ['payload_validated past 2^53', { payload_validated: 2n ** 60n }],
  ];
  for (const [what, over] of HUGE) {
    it(`a row with ${what} is published or parked while the relay keeps running and publishes the other rows`, async () => {
      await using t = await createTestDb();
      const stream = ownStream('CRASH');
      const odd = openedEvent({ owner: 'script' });
      const good = openedEvent({ owner: 'script' });
      await insertScriptRow(t, odd, over);
      await insertScriptRow(t, good);
      const { crashed } = await drain(t, stream);
      expect(crashed, 'the relay process ended on one row').toBeUndefined();
      const inStream = (await readStream(nats().nc, stream)).map((m) => m.event.eventId);
      expect(inStream).toContain(good.eventId);
      const { rows } = await t.client.execute({ sql: 'SELECT status FROM outbox WHERE id = ?', args: [odd.eventId] });
      expect(['sent', 'failed']).toContain(rows[0]!.status);
      if (rows[0]!.status === 'sent') expect(inStream).toContain(odd.eventId);
    });
  }

  it('a row whose attempts column holds text and whose payload is refused is retried or parked, and the relay keeps running', async () => {
    await using t = await createTestDb();
    const stream = ownStream('CRASH');
    const odd = openedEvent({ owner: 'script' });
    const good = openedEvent({ owner: 'script' });
    // 'none' cannot take INTEGER affinity and stays TEXT; the payload is no event, so the relay records a failure
    await insertScriptRow(t, odd, { attempts: 'none', payload: '{"not":"an event"}' });
    await insertScriptRow(t, good);
    const { crashed } = await drain(t, stream);
    expect(crashed, 'the relay process ended on one row').toBeUndefined();
    expect((await readStream(nats().nc, stream)).map((m) => m.event.eventId)).toEqual([good.eventId]);
    const { rows } = await t.client.execute({ sql: 'SELECT status, last_error FROM outbox WHERE id = ?', args: [odd.eventId] });
    expect(rows[0]!.status).not.toBe('sent');
    expect(rows[0]!.last_error).toBeTruthy();
  });
});
