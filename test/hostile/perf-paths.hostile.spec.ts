// Hostile edges of the relay's fast paths (src/nats/ack-publisher.ts, src/outbox/row-message.ts) over real libSQL
// files and a private nats-server per file: a stored row that is not the event its columns describe, and PubAck
// timeouts measured on a wall clock that steps back.
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { errors } from '@nats-io/nats-core';
import { MsgHdrsImpl } from '@nats-io/nats-core/internal';
import type { AckCallback } from '../../src/nats/ack-publisher.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { isBrokerUnavailable } from '../../src/outbox/publish-errors.ts';
import { accountCommands, openedEvent } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { eventually } from '../support/eventually.ts';
import { createRandom } from '../support/random.ts';
import { drainOutbox, relayDeps, runRelay } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';
import { pausedPublisher } from '../support/paused-publisher.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

afterEach(() => {
  vi.restoreAllMocks();
});

/** Inserts a pending row as a script would: the columns of `event`, `payload` as the stored text. */
async function insertRow(t: TestDb, event: ReturnType<typeof openedEvent>, payload: string): Promise<void> {
  await t.client.execute({
    sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, occurred_at, available_at)
          VALUES (?, ?, ?, ?, ?, '{}', 'pending', ?, 0)`,
    args: [event.eventId, event.aggregateType, event.aggregateId, event.type, payload, Date.parse(event.occurredAt)],
  });
}

describe('relay - a stored row is published only as the event its columns describe', () => {
  it('does not publish a row whose payload, parsed, names another aggregate than its subject and headers', async () => {
    await using t = await createTestDb();
    const stream = ownStream('ENV');
    const event = openedEvent({ accountId: 'acc-x' });
    const canonical = JSON.stringify(t.deps.registry.parse(event));
    // the envelope appendToOutbox writes, then a second aggregateId after `data`: subscribers (JSON.parse) read acc-y
    await insertRow(t, event, `${canonical.slice(0, -1)},"aggregateId":"acc-y"}`);
    // and one whose data the registry refuses
    const bad = openedEvent({ accountId: 'acc-z' });
    const badText = JSON.stringify(t.deps.registry.parse(bad));
    await insertRow(t, bad, `${badText.slice(0, badText.indexOf('"data":'))}"data":{"accountId":42}}`);
    await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
    const published = await readStream(nats().nc, stream);
    // what went out, as a subscriber sees it: the subject says acc-x, the event says acc-y
    expect(published.map((m) => ({ subject: m.subject, aggregateId: m.event.aggregateId, header: m.headers['Aggregate-Id'] }))).toEqual([]);
    const { rows } = await t.client.execute('SELECT status FROM outbox ORDER BY seq');
    expect(rows.map((r) => String(r.status))).toEqual(['failed', 'failed']);
  });
});

describe('ack publisher - every callback fires once, within the publish timeout', () => {
  it('times out a message whose PubAck never comes after the publish timeout, even when the wall clock steps back meanwhile', async () => {
    await using paused = await pausedPublisher('CLK', 300);
    const { own, stream, publisher } = paused;
    let calls = 0;
    let error: unknown;
    const settled = new Promise<void>((resolve) => {
      const done: AckCallback = (e) => {
        calls++;
        error = e;
        resolve();
      };
      publisher.publish(`${stream.prefix}.account.a.0`, new TextEncoder().encode('{}'), MsgHdrsImpl.fromRecord({ 'Nats-Msg-Id': ['clock-step'] }), done);
    });
    // NTP (or an operator) steps the system clock back an hour while the PubAck is awaited
    const realNow = Date.now.bind(Date);
    vi.spyOn(Date, 'now').mockImplementation(() => realNow() - 3_600_000);
    const outcome = await Promise.race([settled.then(() => 'settled'), new Promise((r) => setTimeout(() => r('still waiting after 3 s'), 3000))]);
    vi.restoreAllMocks();
    own.resume();
    expect(outcome).toBe('settled');
    expect(calls).toBe(1);
    expect(isBrokerUnavailable(error)).toBe(true);
  });
});

describe('relay - continuation batches under random rejections and outages', () => {
  it('publishes every row once (first copies) and each aggregate in seq order when rows are rejected and the broker drops out at random across continuation batches', async () => {
    await using t = await createTestDb();
    const stream = ownStream('CONT');
    const accounts = accountCommands(t.deps);
    const ids = await accounts.openMany(40);
    for (let round = 0; round < 8; round++) await Promise.all(ids.map((id) => accounts.deposit(id, round + 1)));
    const random = createRandom(20261201);
    const deps = relayDeps(t, nats().url, {
      stream,
      settings: { batch: 7, maxInFlight: 5, backoffBaseMs: 5, maxBackoffMs: 20, maxAttempts: 1000 },
      faults: {
        beforePublish: () => (random.chance(0.05) ? new Error('rejected by a fault') : random.chance(0.01) ? new errors.TimeoutError() : undefined),
      },
    });
    for (let run = 0; run < 60; run++) {
      await createRelay(deps).run({ untilIdle: true, timeLimitMs: 20_000 });
      const { rows } = await t.client.execute("SELECT count(*) AS n FROM outbox WHERE status != 'sent'");
      if (Number(rows[0]!.n) === 0) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    const { rows } = await t.client.execute('SELECT id, aggregate_id, status FROM outbox ORDER BY seq');
    expect(rows.filter((r) => String(r.status) !== 'sent')).toEqual([]);
    const order = new Map<string, string[]>();
    for (const r of rows) order.set(String(r.aggregate_id), [...(order.get(String(r.aggregate_id)) ?? []), String(r.id)]);
    const msgs = await readStream(nats().nc, stream);
    const firstCopies = new Map<string, string[]>();
    const seen = new Set<string>();
    for (const m of msgs) {
      const id = m.headers['Nats-Msg-Id']!;
      if (seen.has(id)) continue;
      seen.add(id);
      firstCopies.set(m.headers['Aggregate-Id']!, [...(firstCopies.get(m.headers['Aggregate-Id']!) ?? []), id]);
    }
    expect(seen.size).toBe(rows.length);
    for (const [aggregate, published] of firstCopies) expect(published, aggregate).toEqual(order.get(aggregate));
  });
});

/**
 * A TCP relay in front of a real nats-server: `blackhole()` drops every byte both ways (a network that swallows
 * traffic without closing: no PubAck comes back), `cut()` resets every connection and forwards again, so the client
 * reconnects at once to the same, healthy broker.
 */
async function startProxy(upstreamPort: number): Promise<{ url: string; blackhole(): void; cut(): void; close(): Promise<void> }> {
  let dropping = false;
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    const upstream = createConnection({ host: '127.0.0.1', port: upstreamPort });
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    client.on('data', (d) => void (dropping || upstream.write(d)));
    upstream.on('data', (d) => void (dropping || client.write(d)));
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    url: `nats://127.0.0.1:${port}`,
    blackhole: () => void (dropping = true),
    cut() {
      for (const [a, b] of [...pairs]) {
        a.destroy();
        b.destroy();
      }
      dropping = false;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const [a, b] of [...pairs]) {
          a.destroy();
          b.destroy();
        }
        server.close(() => resolve());
      }),
  };
}

describe('relay - the broker back-off ends when the connection comes back', () => {
  it('publishes within moments of the PubAck timeouts when the connection came back while a pass still awaited its PubAcks', async () => {
    await using broker = await startNats();
    await using t = await createTestDb();
    const proxy = await startProxy(broker.port);
    try {
      const stream = ownStream('RACE');
      const admin = await natsClient(broker.url);
      await createStream(admin, stream);
      const { relay, stop } = runRelay(
        relayDeps(t, proxy.url, {
          stream,
          // a first back-off of 4–6 s, PubAcks awaited 1.5 s
          settings: { backoffBaseMs: 5000, maxBackoffMs: 5000, publishTimeoutMs: 1500 },
          lease: { owner: 'racing-relay', ttlMs: 30_000 },
        }),
      );
      await eventually(async () => relay.state() === 'connected' && (relay.leases()?.partitions.length ?? 0) > 0, {
        what: 'the relay connected with its leases',
      });
      proxy.blackhole();
      const ids = await accountCommands(t.deps).openMany(10);
      // the pass has published into the void; the connection drops and comes back (≈ at once) long before its PubAcks time out
      await new Promise((r) => setTimeout(r, 300));
      proxy.cut();
      const cutAt = Date.now();
      await eventually(async () => (await readStream(admin, stream)).length === ids.length, { what: 'every event published', timeoutMs: 20_000 });
      // the PubAck timeout (1.5 s) and one pass; a back-off slept out in full after that would take 4 s or more
      expect(Date.now() - cutAt).toBeLessThan(3500);
      await stop();
      await admin.close();
    } finally {
      await proxy.close();
    }
  });
});
