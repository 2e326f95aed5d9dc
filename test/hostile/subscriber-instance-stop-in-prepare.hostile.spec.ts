// A subscriber instance (the consumers role, leased) stopped while it readies its durables on a frozen broker: its
// leases go back at once (another instance takes over well before their TTL), and that instance applies every event
// once, each aggregate's in order, even when the stop landed half-way through creating the partition durables.
import { createClient, type Client } from '@libsql/client';
import { describe, expect, it } from 'vitest';
import { DRIVER_BUSY_WAIT_MS, setBusyBudget } from '../../src/db/write-lock.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { createSubscriberDb, type SubscriberDb } from '../support/consumer.ts';
import { countRows } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { freezingConnect } from '../support/frozen-broker.ts';
import { natsClient, startNats, type NatsServer } from '../support/nats.ts';
import { createTestService } from '../support/service.ts';
import { durablesOf, freshStream, publishRaw, streamEnv } from '../support/stream.ts';

const TTL_MS = 12_000;
const BASE = 'hono-outbox-audit';

function sharedClient(url: string): Client {
  const client = createClient({ url, timeout: DRIVER_BUSY_WAIT_MS });
  setBusyBudget(client, 10_000);
  return client;
}

function startInstance(
  server: NatsServer,
  name: string,
  sdb: SubscriberDb,
  stream: StreamSettings,
  env: Record<string, string>,
  connect?: () => ReturnType<ReturnType<typeof freezingConnect>>,
) {
  return createTestService(
    {
      ROLES: 'consumers',
      CONSUMERS: 'audit',
      NATS_URL: server.url,
      ...streamEnv(stream),
      INSTANCE_NAME: name,
      RELAY_LEASE_TTL_MS: String(TTL_MS),
      CONSUMER_ACK_WAIT_MS: '3000',
      ...env,
    },
    { openSubscriberDb: async () => sharedClient(sdb.url), ...(connect ? { connect } : {}) },
  );
}

async function appliedVersions(client: Client): Promise<Map<string, number[]>> {
  const rows = (await client.execute('SELECT account_id, aggregate_version FROM audit_log ORDER BY n')).rows;
  const out = new Map<string, number[]>();
  for (const r of rows) out.set(String(r.account_id), [...(out.get(String(r.account_id)) ?? []), Number(r.aggregate_version)]);
  return out;
}

const held = async (client: Client) => countRows(client, 'leases', "scope = 'audit' AND owner IS NOT NULL");

describe('subscriber instance - stopped while readying its durables on a frozen broker', () => {
  for (const [mode, env, freezeOn] of [
    ['single', {}, /^\$JS\.API\./],
    ['partitioned, at its first request', { CONSUMER_PARTITIONED: 'true' }, /^\$JS\.API\./],
    // half-way: partition durables 0-4 exist, the request for the sixth waits on the frozen broker
    [
      'partitioned, half-way through creating its partition durables',
      { CONSUMER_PARTITIONED: 'true' },
      new RegExp(`^\\$JS\\.API\\.CONSUMER\\.\\S*\\.${BASE}-p5($|\\.)`),
    ],
  ] as const) {
    it(`${mode}: stops within seconds, its leases are free at once, and the next instance applies every event once in aggregate order`, async () => {
      await using server = await startNats();
      const nc = await natsClient(server.url);
      const stream = await freshStream(nc, 'SIPR');
      const accounts = Array.from({ length: 24 }, (_, i) => `sipr-${process.pid}-${i}`);
      for (let version = 1; version <= 3; version++)
        await Promise.all(
          accounts.map((accountId) => {
            const e = version === 1 ? openedEvent({ accountId }) : creditedEvent({ accountId, version });
            return publishRaw(nc, stream, e, e.eventId);
          }),
        );
      await nc.close();
      await using sdb = await createSubscriberDb({ subscriber: 'audit' });

      const frozen: { at?: number } = {};
      const a = await startInstance(server, 'a', sdb, stream, env, freezingConnect(server, freezeOn, frozen, 'freezing instance'));
      let closedA = false;
      try {
        await eventually(() => frozen.at !== undefined, { what: 'a request of its prepare on the frozen broker', timeoutMs: 20_000 });
        expect(await held(sdb.client)).toBeGreaterThan(0);
        await new Promise((r) => setTimeout(r, 300));
        const from = performance.now();
        await a.close();
        closedA = true;
        const stopMs = performance.now() - from;
        const leftHeld = await held(sdb.client);
        server.resume();
        expect({ stopFast: stopMs < 3000, leftHeld }, `stopped after ${Math.round(stopMs)} ms`).toEqual({ stopFast: true, leftHeld: 0 });
      } finally {
        server.resume();
        if (!closedA) await a.close().catch(() => undefined);
      }

      const tookOverFrom = performance.now();
      await using b = await startInstance(server, 'b', sdb, stream, env);
      const want = mode === 'single' ? 1 : 16;
      await eventually(() => b.service.consumers[0]!.leases().partitions.length === want, {
        what: `${want} partitions held by the next instance`,
        timeoutMs: TTL_MS + 5000,
      });
      // well under the TTL: nothing was left held by the stopped instance
      expect(performance.now() - tookOverFrom).toBeLessThan(TTL_MS / 2);

      const total = accounts.length * 3;
      await eventually(async () => (await countRows(sdb.client, 'inbox')) >= total, { timeoutMs: 30_000, what: `${total} events applied` });
      await new Promise((r) => setTimeout(r, 1500));
      expect(await countRows(sdb.client, 'inbox')).toBe(total);
      expect(await countRows(sdb.client, 'audit_log')).toBe(total);
      const applied = await appliedVersions(sdb.client);
      for (const id of accounts) expect(applied.get(id), id).toEqual([1, 2, 3]);
      if (mode !== 'single') {
        const check = await natsClient(server.url);
        const names = (await durablesOf(check, stream.name)).map((c) => c.name);
        await check.close();
        expect(names.sort()).toEqual(Array.from({ length: 16 }, (_, k) => `${BASE}-p${k}`).sort());
      }
    }, 90_000);
  }
});
