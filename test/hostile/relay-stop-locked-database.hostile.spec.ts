// A relay on a healthy broker stopped while its mark-sent write waits for another process's write lock: closing its
// connection 2 s after the stop must not lose a row, store one twice, count an attempt, or change an aggregate's
// order for the next relay, and the stopped relay hands its partitions over once the lock is gone (not after the TTL).
import { describe, expect, it } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { registryOf } from '../../src/compose/define-modules.ts';
import { parseConfig } from '../../src/config.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { openClient } from '../../src/entry/boot.ts';
import { silentLogger } from '../../src/logger.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { RELAY_LEASE_SCOPE } from '../../src/outbox/relay-store.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb, MARKED_SENT } from '../support/db.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { relayDeps } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

const LEASE_TTL_MS = 30_000;
const BUSY_TIMEOUT_MS = 5000;

function versionsByAggregate(events: IntegrationEvent[]): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const e of events) (out[e.aggregateId] ??= []).push(e.aggregateVersion);
  return out;
}

describe('relay - stopped while its mark-sent write waits for a foreign write lock', () => {
  for (const [when, holdMs] of [
    ['the lock goes 3.5 s after the stop (the connection is closed by then, the write commits)', 3500],
    ['the lock outlasts the busy timeout (the write fails)', 7000],
  ] as const) {
    it(`${when}: every row stored once, in aggregate order, no attempt counted, leases free once the lock is gone`, async () => {
      await using server = await startNats();
      await using created = await createTestDb();
      // the relay's database opened as the service opens it: a busy budget waited out asynchronously
      const client = await openClient(created.url, parseConfig({ DATABASE_URL: created.url, DATABASE_BUSY_TIMEOUT_MS: String(BUSY_TIMEOUT_MS) }));
      const t = { ...created, client, deps: createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)) };
      const stream = ownStream('RLCK');
      const nc = await natsClient(server.url);
      await createStream(nc, stream);
      const commands = accountCommands(t.deps);
      const ids = await commands.openMany(40);
      for (const id of ids) await commands.deposit(id, 1);
      for (const id of ids) await commands.deposit(id, 2);
      const total = 120;
      try {
        await using holder = await startWriteLockHolder(t.url);

        const abort = new AbortController();
        let stoppedAt: number | undefined;
        const deps = relayDeps(t, server.url, {
          stream,
          lease: { owner: 'relay-one', ttlMs: LEASE_TTL_MS },
          settings: { batch: 25 },
          faults: {
            // after the second pass's PubAcks: its mark queues behind the lock, and the stop lands while it waits
            afterPubAcks: (() => {
              let passes = 0;
              return async () => {
                if (++passes !== 2) return;
                await holder.lock();
                abort.abort();
                stoppedAt = performance.now();
              };
            })(),
          },
        });
        const running = createRelay(deps).run({ signal: abort.signal, timeLimitMs: 60_000 });
        let released = false;
        const releasing = (async () => {
          while (stoppedAt === undefined) await new Promise((r) => setTimeout(r, 10));
          await new Promise((r) => setTimeout(r, holdMs));
          await holder.release();
          released = true;
        })();
        const summary = await running;
        const endedAt = performance.now();
        await releasing;
        expect(stoppedAt).toBeDefined();
        // it waited for its write (and its release) rather than leave them: it ended after the lock went
        expect(released || endedAt - stoppedAt! >= holdMs - 100).toBe(true);
        const leftHeld = await countRows(t.client, 'leases', 'scope = ? AND owner IS NOT NULL', [RELAY_LEASE_SCOPE]);
        expect({ leftHeld, stoppedWithinLockPlus: endedAt - stoppedAt! < holdMs + 3000 }).toEqual({ leftHeld: 0, stoppedWithinLockPlus: true });
        const onStreamAfterFirst = (await readStream(nc, stream)).length;
        const sentAfterFirst = await countRows(t.client, 'outbox', MARKED_SENT);
        // no row marked sent that the stream lacks
        expect(sentAfterFirst).toBeLessThanOrEqual(onStreamAfterFirst);
        // the run's summary counts only passes whose marks committed
        expect(summary.published).toBe(sentAfterFirst);

        // the next relay, with the same long TTL: it gets the partitions only if the first one released them
        await createRelay(relayDeps(t, server.url, { stream, lease: { owner: 'relay-two', ttlMs: LEASE_TTL_MS } })).run({
          untilIdle: true,
          timeLimitMs: 20_000,
        });
        expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(total);
        const stored = (await readStream(nc, stream)).map((e) => e.event);
        await nc.close();
        expect(stored.length).toBe(total);
        expect(new Set(stored.map((e) => e.eventId)).size).toBe(total);
        const ordered = versionsByAggregate(stored);
        for (const id of ids) expect(ordered[id], `versions of ${id} in stream order`).toEqual([1, 2, 3]);
        expect(await countRows(t.client, 'outbox', 'attempts > 0')).toBe(0);
      } finally {
        client.close();
      }
    }, 90_000);
  }
});
