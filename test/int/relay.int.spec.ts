import { createClient } from '@libsql/client';
import { createAckPublisher } from '../../src/nats/ack-publisher.ts';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { defineEvents } from '../../src/events/define-events.ts';
import { createEventRegistry } from '../../src/events/registry.ts';
import { createCommand } from '../../src/http/command-route.ts';
import { requeueFailed } from '../../src/outbox/failed-rows.ts';
import { partitionOf } from '../../src/outbox/partition.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { relayPass } from '../../src/outbox/relay-pass.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { deposit } from '../support/fixture/accounts/commands.ts';
import { fixtureEvents } from '../support/fixture/modules.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

async function outboxRows(t: TestDb) {
  const res = await t.client.execute('SELECT seq, id, status, attempts, sent_at, last_error, aggregate_id FROM outbox ORDER BY seq');
  return res.rows.map((r) => ({
    seq: Number(r.seq),
    id: String(r.id),
    status: String(r.status),
    attempts: Number(r.attempts),
    sentAt: r.sent_at === null ? null : Number(r.sent_at),
    lastError: r.last_error === null ? null : String(r.last_error),
    aggregateId: String(r.aggregate_id),
  }));
}

describe('relay - publishing', () => {
  it('publishes committed events to the stream in seq order with the documented subject and headers', async () => {
    await using t = await createTestDb();
    const stream = ownStream('RELAY');
    const accounts = accountCommands(t.deps);
    const ids = await accounts.openMany(5);
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await t.deps.writer.write((tx) => deposit(tx, { amountCents: 250 }, createCommand(tx, t.deps, { params: { id: ids[0]! }, headers: { traceparent } })));
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream }));
    expect(summary.published).toBe(6);

    const rows = await outboxRows(t);
    expect(rows.every((r) => r.status === 'sent' && r.sentAt !== null)).toBe(true);
    const msgs = await readStream(nats().nc, stream);
    expect(msgs.map((m) => m.headers['Nats-Msg-Id'])).toEqual(rows.map((r) => r.id));
    const last = msgs[5]!;
    expect(last.subject).toBe(`${stream.prefix}.account.${ids[0]}.${partitionOf('account', ids[0]!, 16)}`);
    expect(last.headers).toMatchObject({
      'Event-Type': 'account.credited.v1',
      'Aggregate-Type': 'account',
      'Aggregate-Id': ids[0],
      'Aggregate-Version': '2',
      'Content-Type': 'application/json',
      // the relay's producer span: the stored trace, a span id of its own (relay-telemetry.int.spec.ts)
      traceparent: expect.stringMatching(/^00-0af7651916cd43dd8448eb211c80319c-(?!b7ad6b7169203331)[0-9a-f]{16}-01$/),
    });
    expect(last.headers['Occurred-At']).toBe(last.event.occurredAt);
    expect(last.event).toMatchObject({ eventId: rows[5]!.id, type: 'account.credited.v1', aggregateVersion: 2, data: { accountId: ids[0], amountCents: 250 } });
  });

  it('a crash between PubAck and mark-sent re-publishes, and the broker acknowledges the copies as duplicates', async () => {
    await using t = await createTestDb();
    const stream = ownStream('RELAY');
    await accountCommands(t.deps).openMany(4);
    const crashing = relayDeps(t, nats().url, {
      stream,
      faults: {
        afterPubAcks() {
          throw new Error('crash after PubAck');
        },
      },
    });
    await expect(createRelay(crashing).run({ untilIdle: true })).rejects.toThrow('crash after PubAck');
    expect((await outboxRows(t)).every((r) => r.status === 'pending')).toBe(true);
    expect(await readStream(nats().nc, stream)).toHaveLength(4);

    const summary = await drainOutbox(relayDeps(t, nats().url, { stream }));
    expect(summary).toMatchObject({ published: 0, duplicates: 4 });
    expect((await outboxRows(t)).every((r) => r.status === 'sent')).toBe(true);
    expect(await readStream(nats().nc, stream)).toHaveLength(4);
  });

  it('keeps per-aggregate order when the 2nd of 3 events of an aggregate fails once', async () => {
    await using t = await createTestDb();
    const stream = ownStream('RELAY');
    const accounts = accountCommands(t.deps);
    const a = await accounts.open('owner-a');
    const b = await accounts.open('owner-b');
    await accounts.deposit(a, 10);
    await accounts.close(a);
    const second = (await outboxRows(t)).filter((r) => r.aggregateId === a)[1]!;
    let failedOnce = false;
    const deps = relayDeps(t, nats().url, {
      stream,
      // long enough that the next pass surely comes inside the retry delay, however loaded the machine
      settings: { backoffBaseMs: 2000, maxBackoffMs: 2000 },
      faults: {
        beforePublish(row) {
          if (row.id === second.id && !failedOnce) {
            failedOnce = true;
            return new Error('rejected once by a fault');
          }
          return undefined;
        },
      },
    });
    await createStream(nats().nc, stream);
    const first = await relayPass(deps, createAckPublisher(nats().nc, 5000));
    expect(first).toMatchObject({ published: 2, failed: 1 }); // a#1 and b#1; a#2 failed, a#3 held back
    const afterFirst = await outboxRows(t);
    expect(afterFirst.find((r) => r.id === second.id)).toMatchObject({ status: 'pending', attempts: 1, lastError: 'rejected once by a fault' });
    // the held-back third event is not published while the second waits out its retry delay
    const early = await relayPass(deps, createAckPublisher(nats().nc, 5000));
    expect(early.published).toBe(0);

    const rest = await createRelay(deps).run({ maxMessages: 2, timeLimitMs: 10_000 });
    expect(rest.published).toBe(2);
    const msgs = await readStream(nats().nc, stream);
    expect(msgs.filter((m) => m.subject === `${stream.prefix}.account.${a}.${partitionOf('account', a, 16)}`).map((m) => m.event.aggregateVersion)).toEqual([
      1, 2, 3,
    ]);
    expect(msgs.filter((m) => m.subject === `${stream.prefix}.account.${b}.${partitionOf('account', b, 16)}`)).toHaveLength(1);
  });

  it('parks a poison row as failed after the maximum attempts while other aggregates keep flowing, and a re-queue retries it', async () => {
    await using t = await createTestDb();
    const stream = ownStream('RELAY');
    await t.client.execute({
      sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at)
            VALUES ('poison-1', 'account', 'p1', 'account.frozen.v1', ?, 'pending', 0, 0)`,
      args: [
        JSON.stringify({
          eventId: 'poison-1',
          type: 'account.frozen.v1',
          aggregateType: 'account',
          aggregateId: 'p1',
          aggregateVersion: 1,
          occurredAt: '2026-01-01T00:00:00.000Z',
          data: {},
        }),
      ],
    });
    const deps = relayDeps(t, nats().url, { stream, settings: { backoffBaseMs: 10, maxBackoffMs: 20 } });
    const stop = new AbortController();
    const running = createRelay(deps).run({ signal: stop.signal, timeLimitMs: 20_000 });
    const good = await accountCommands(t.deps).openMany(3);
    deps.wake.notify();
    await eventually(
      async () => {
        const rows = await outboxRows(t);
        return rows.find((r) => r.id === 'poison-1')?.status === 'failed' && rows.filter((r) => r.status === 'sent').length === 3;
      },
      { what: 'the poison row parked and the others sent' },
    );
    const rows = await outboxRows(t);
    const poison = rows.find((r) => r.id === 'poison-1')!;
    expect(poison).toMatchObject({ status: 'failed', attempts: 5 });
    expect(poison.lastError).toContain('account.frozen.v1');
    expect(rows.filter((r) => good.includes(r.aggregateId)).every((r) => r.status === 'sent')).toBe(true);

    // re-queued under a registry that now knows the type, it is published once
    stop.abort();
    await running;
    expect(await t.deps.writer.write((tx) => requeueFailed(tx, 'poison-1', Date.now()))).toBe(1);
    expect((await outboxRows(t)).find((r) => r.id === 'poison-1')).toMatchObject({ status: 'pending' });
    const fixed = createEventRegistry(defineEvents({ ...fixtureEvents, 'account.frozen.v1': { aggregate: 'account', data: z.object({}) } }));
    await drainOutbox(relayDeps(t, nats().url, { stream, registry: fixed }));
    expect((await outboxRows(t)).find((r) => r.id === 'poison-1')?.status).toBe('sent');
    expect((await readStream(nats().nc, stream)).filter((m) => m.headers['Nats-Msg-Id'] === 'poison-1')).toHaveLength(1);
  });

  it('a commit in the same process wakes the relay without waiting for the poll interval', async () => {
    await using t = await createTestDb();
    const stream = ownStream('RELAY');
    const deps = relayDeps(t, nats().url, { stream, pollMs: 60_000 });
    const stop = new AbortController();
    const running = createRelay(deps).run({ signal: stop.signal, maxMessages: 1 });
    await new Promise((r) => setTimeout(r, 300)); // the relay is now asleep for up to a minute
    await accountCommands(t.deps).open();
    deps.wake.notify();
    const summary = await Promise.race([running, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 10_000))]);
    stop.abort();
    expect(summary).toMatchObject({ published: 1 });
  });
});

describe('relay - database contention', () => {
  it('a database locked by another process past the busy timeout makes the relay back off, not stop, and nothing is lost', async () => {
    await using t = await createTestDb();
    const relayClient = createClient({ url: t.url, timeout: 100 });
    const locker = createClient({ url: t.url });
    try {
      const stream = ownStream('RELAY');
      await accountCommands(t.deps).openMany(3);
      const db = createDatabase(relayClient);
      let lock: Awaited<ReturnType<typeof locker.transaction>> | undefined;
      const deps = relayDeps(t, nats().url, {
        db,
        writer: createWriter(db),
        stream,
        faults: {
          // another process takes the write lock between the PubAcks and the mark-sent write
          async afterPubAcks() {
            if (lock) return;
            lock = await locker.transaction('write');
            await lock.execute("UPDATE outbox SET headers = headers WHERE id = 'none'");
          },
        },
      });
      const stop = new AbortController();
      const running = createRelay(deps).run({ signal: stop.signal, timeLimitMs: 20_000 });
      // published, but the mark-sent write cannot get the lock
      await eventually(async () => (await readStream(nats().nc, stream).catch(() => [])).length === 3, { what: 'three messages on the stream' });
      await new Promise((r) => setTimeout(r, 400));
      expect((await outboxRows(t)).every((r) => r.status === 'pending')).toBe(true);
      await lock!.rollback();
      await eventually(async () => (await outboxRows(t)).every((r) => r.status === 'sent'), { what: 'every row marked sent' });
      stop.abort();
      await running;
      expect(await readStream(nats().nc, stream)).toHaveLength(3);
    } finally {
      relayClient.close();
      locker.close();
    }
  });

  it('a relay started while another process holds the write lock publishes nothing until it can lease, then everything', async () => {
    await using t = await createTestDb();
    const relayClient = createClient({ url: t.url, timeout: 100 });
    const locker = createClient({ url: t.url });
    try {
      const stream = ownStream('RELAY');
      await accountCommands(t.deps).openMany(3);
      const db = createDatabase(relayClient);
      const deps = relayDeps(t, nats().url, { db, writer: createWriter(db), stream });
      const lock = await locker.transaction('write');
      await lock.execute("UPDATE outbox SET headers = headers WHERE id = 'none'");
      const stop = new AbortController();
      const running = createRelay(deps).run({ signal: stop.signal, timeLimitMs: 20_000 });
      await new Promise((r) => setTimeout(r, 600));
      expect(await readStream(nats().nc, stream).catch(() => [])).toHaveLength(0);
      await lock.rollback();
      await eventually(async () => (await outboxRows(t)).every((r) => r.status === 'sent'), { what: 'every row marked sent' });
      stop.abort();
      await running;
      expect(await readStream(nats().nc, stream)).toHaveLength(3);
    } finally {
      relayClient.close();
      locker.close();
    }
  });
});
