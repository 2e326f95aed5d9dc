// `seq` is the outbox's INTEGER PRIMARY KEY, so `rowid`, `oid` and `_rowid_` name the very same column, and SQLite
// matches an `UPDATE OF seq` trigger by the names in the SET clause: a statement moving a row past 2^53 through an
// alias must be refused as one naming seq is (migration 0009_outbox_seq_range's UPDATE trigger names no column), or
// every fetch of the relay would fail with the driver's RangeError and every later command's seq would lie past it.
// Real libSQL file, real relay, real nats-server.
import { describe, expect, it } from 'vitest';
import { accountCommands } from '../support/accounts.ts';
import { eventually } from '../support/eventually.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const PAST_SAFE = 2n ** 53n + 10n;
const sentCount = async (s: Awaited<ReturnType<typeof createTestService>>) =>
  Number((await s.client.execute("SELECT count(*) FROM outbox WHERE status = 'sent'")).rows[0]![0]);

describe('outbox - a seq moved past 2^53 through an alias of the rowid', () => {
  it.each(['rowid', 'oid', '_rowid_'])(
    'UPDATE outbox SET %s = 2^53 + 10 is refused as "outbox seq out of range", and the relay and later commands go on',
    async (alias) => {
      const stream = await freshStream(nats().nc, `SEQA${alias.replace(/_/g, '').toUpperCase()}`);
      await using s = await createTestService({ ROLES: 'api,relay', NATS_URL: nats().url, ...streamEnv(stream) });
      const accounts = accountCommands(s.deps);
      const [first] = await accounts.openMany(1);
      await eventually(async () => (await sentCount(s)) === 1, { what: 'the first row sent' });

      await expect(s.client.execute({ sql: `UPDATE outbox SET ${alias} = ? WHERE aggregate_id = ?`, args: [PAST_SAFE, first!] })).rejects.toThrow(
        /outbox seq out of range/,
      );
      expect(Number((await s.client.execute('SELECT max(seq) AS high FROM outbox')).rows[0]!.high)).toBeLessThan(1000);

      await accounts.openMany(3);
      await eventually(async () => (await sentCount(s)) === 4, { timeoutMs: 10_000, what: 'the later rows sent' });
    },
  );
});
