// A foreign process holds the write lock past the busy budget exactly when the relay, having caught up
// with a backlog it recorded in outbox_sent, folds those marks in; new commands keep arriving once the lock goes.
// Every event must reach the stream once, every row end `sent`, outbox_sent end empty.
import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { parseConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import type { Writer } from '../../src/db/writer.ts';
import { createDeps } from '../../src/deps.ts';
import { openClient } from '../../src/entry/boot.ts';
import { silentLogger } from '../../src/logger.ts';
import { outboxOrder, streamOrder } from '../support/aggregate-order.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { relayDeps, runRelay } from '../support/relay.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

const nats = useNats();
const BUSY_MS = 800;

describe('the fold after catching up meets a foreign write lock', () => {
  it('loses no event and leaves nothing recorded once the lock goes and new commands arrive', { timeout: 20_000 }, async () => {
    await using created = await createTestDb();
    const client = await openClient(created.url, parseConfig({ DATABASE_URL: created.url, DATABASE_BUSY_TIMEOUT_MS: String(BUSY_MS) }));
    try {
      const t = { ...created, client, deps: createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)) };
      await client.execute('CREATE TABLE recorded_log (seq INTEGER)');
      await client.execute('CREATE TRIGGER recorded_inserts AFTER INSERT ON outbox_sent BEGIN INSERT INTO recorded_log VALUES (NEW.seq); END');
      const cmds = accountCommands(t.deps);
      const ids = await cmds.openMany(21);
      for (const id of ids) await cmds.deposit(id, 5);
      const maxSeq = Number((await client.execute('SELECT max(seq) AS m FROM outbox')).rows[0]!.m);
      await using holder = await startWriteLockHolder(t.url);

      let armed = false;
      let relayWrites = 0;
      let foldFailed = 0;
      let lockedOnce = false;
      let released: Promise<void> | undefined;
      let arrivals: Promise<void> | undefined;
      const inner = t.deps.writer;
      const writer: Writer = {
        ...inner,
        write: (async (fn: Parameters<Writer['write']>[0], options?: Parameters<Writer['write']>[1]) => {
          const urgent = (options as { urgent?: boolean } | undefined)?.urgent;
          if (armed && !urgent && !lockedOnce && ++relayWrites === 2) {
            // the write after the caught-up pass's own mark: its fold
            lockedOnce = true;
            await holder.lock();
            released = new Promise<void>((resolve) => setTimeout(resolve, BUSY_MS * 2 + 500)).then(async () => {
              await holder.release();
              // commands keep arriving after the lock goes
              arrivals = (async () => {
                const more = await cmds.openMany(6);
                for (let r = 0; r < 5; r++) await Promise.all([...ids.slice(0, 6), ...more].map((id) => cmds.deposit(id, r + 1)));
              })();
            });
            try {
              return await inner.write(fn, options);
            } catch (error) {
              foldFailed++;
              throw error;
            }
          }
          return inner.write(fn, options);
        }) as Writer['write'],
      };
      const stream = await freshStream(nats().nc, 'FOLDLOCKED');
      const deps = relayDeps(t, nats().url, {
        stream,
        writer,
        settings: { batch: 4 },
        faults: {
          afterPubAcks: (acked) => {
            if (!lockedOnce && acked.some((r) => r.seq === maxSeq)) armed = true;
          },
        },
      });
      const relay = runRelay(deps, 20_000);
      try {
        await eventually(() => released !== undefined, { timeoutMs: 8000, what: 'the fold to meet the lock' });
        await released;
        await eventually(() => arrivals !== undefined, { timeoutMs: 2000, what: 'commands after the lock' });
        await arrivals;
        await eventually(
          async () => ((await countRows(client, 'outbox', "status != 'sent'")) === 0 && (await countRows(client, 'outbox_sent')) === 0 ? true : undefined),
          { timeoutMs: 8000, what: 'every row sent and folded' },
        );
      } finally {
        await relay.stop();
      }
      expect(lockedOnce).toBe(true);
      expect(foldFailed, 'the fold under the lock failed at least once').toBeGreaterThan(0);
      expect(await countRows(client, 'recorded_log')).toBeGreaterThan(0);
      const total = await countRows(client, 'outbox');
      const msgs = await readStream(nats().nc, stream);
      const got = msgs.map((m) => m.headers['Nats-Msg-Id']);
      expect(new Set(got).size, 'an event stored twice').toBe(got.length);
      expect(got.length).toBe(total);
      const want = await outboxOrder(t);
      const order = streamOrder(msgs);
      for (const [agg, list] of want) expect(order.get(agg), agg).toEqual(list);
      expect(await countRows(client, 'outbox_sent')).toBe(0);
    } finally {
      client.close();
    }
  });
});
