// Attacks the one-pair-of-callbacks relay pass: PubAcks (real, from a private nats-server) handed back to the pass
// late and in shuffled order, injected faults, duplicate checks resolving out of order, a closed connection.
import type { PubAck } from '@nats-io/jetstream';
import { jetstreamManager } from '@nats-io/jetstream';
import type { MsgHdrs } from '@nats-io/nats-core';
import { describe, expect, it } from 'vitest';
import { createAckPublisher, type AckCallback, type AckPublisher } from '../../src/nats/ack-publisher.ts';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';
import { relayPass, type StoredMessage } from '../../src/outbox/relay-pass.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { createRandom } from '../support/random.ts';
import { relayDeps } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';
import { natsClient } from '../support/nats.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** `n` events over `aggregates` accounts, versions in order, as the service stores them. */
async function store(t: TestDb, n: number, aggregates: number) {
  const versions = new Map<number, number>();
  const events = Array.from({ length: n }, (_, i) => {
    const a = i % aggregates === 0 ? 0 : (i * 7919) % aggregates; // aggregate 0 is hot
    const v = (versions.get(a) ?? 0) + 1;
    versions.set(a, v);
    return v === 1 ? openedEvent({ accountId: `acc-${a}`, owner: `o-${i}` }) : creditedEvent({ accountId: `acc-${a}`, version: v, amountCents: i + 1 });
  });
  for (let i = 0; i < events.length; i += 500)
    await t.deps.writer.write((tx) => appendToOutbox(tx, events.slice(i, i + 500), { registry: t.deps.registry, now: new Date() }));
}

type Row = { seq: number; id: string; aggregate_id: string; status: string; attempts: number };
async function rows(t: TestDb): Promise<Row[]> {
  const r = await t.client.execute('SELECT seq, id, aggregate_id, status, attempts FROM outbox ORDER BY seq');
  return r.rows.map((x) => ({
    seq: Number(x.seq),
    id: String(x.id),
    aggregate_id: String(x.aggregate_id),
    status: String(x.status),
    attempts: Number(x.attempts),
  }));
}

/**
 * Wraps a real publisher: records every publish's msg id against the context it was given, checks every callback
 * gets its own publish's context exactly once, tracks messages in flight per aggregate subject, and holds the
 * outcomes back to deliver them in a random order.
 */
function shuffling(inner: AckPublisher, random: () => number) {
  const problems: string[] = [];
  const inFlight = new Map<string, number>();
  let maxPerAggregate = 0;
  let calls = 0;
  const held: Array<() => void> = [];
  const flush = () => {
    while (held.length > 0) {
      const i = Math.floor(random() * held.length);
      const [f] = held.splice(i, 1);
      f!();
    }
  };
  let _timer: ReturnType<typeof setTimeout> | undefined;
  const schedule = () => {
    _timer ??= setTimeout(
      () => {
        _timer = undefined;
        flush();
      },
      Math.floor(random() * 5),
    );
  };
  const publisher: AckPublisher = {
    publish<C>(subject: string, data: Uint8Array, headers: MsgHdrs, done: AckCallback<C>, context?: C) {
      const msgId = headers.get('Nats-Msg-Id');
      const ctxId = (context as { row?: { id?: string } } | undefined)?.row?.id;
      if (ctxId !== msgId) problems.push(`publish of ${msgId} with the context of ${ctxId}`);
      const n = (inFlight.get(subject) ?? 0) + 1;
      inFlight.set(subject, n);
      maxPerAggregate = Math.max(maxPerAggregate, n);
      let seen = 0;
      inner.publish(
        subject,
        data,
        headers,
        (error: unknown, ack: PubAck | undefined, c: C) => {
          if (c !== context) problems.push(`callback of ${msgId} with another context`);
          if (++seen > 1) problems.push(`callback of ${msgId} called ${seen} times`);
          calls++;
          held.push(() => {
            inFlight.set(subject, inFlight.get(subject)! - 1);
            done(error, ack, c);
          });
          schedule();
        },
        context,
      );
    },
    pending: () => inner.pending() + held.length,
    close: () => inner.close(),
  };
  return { publisher, problems, maxPerAggregate: () => maxPerAggregate, calls: () => calls };
}

const seeded = (seed: number) => createRandom(seed).next;

describe('relay pass - each PubAck, failure and duplicate check reaches the row it was published for', () => {
  it('marks sent every row whose PubAck came back late and out of order, with one message per aggregate in flight and its order kept', async () => {
    await using t = await createTestDb();
    const stream = ownStream('CTX');
    await createStream(nats().nc, stream);
    await store(t, 1200, 40);
    const random = seeded(99);
    const shuf = shuffling(createAckPublisher(nats().nc, 5000), random);
    const deps = relayDeps(t, nats().url, { stream, settings: { batch: 200, maxInFlight: 32 } });
    const ackedSeqs: number[] = [];
    let guard = 0;
    for (;;) {
      const r = await relayPass(deps, shuf.publisher, { continuations: 3 });
      ackedSeqs.push(...r.ackedSeqs);
      if (r.fetched === 0 || ++guard > 100) break;
    }
    expect(shuf.problems).toEqual([]);
    expect(shuf.maxPerAggregate()).toBe(1);
    const all = await rows(t);
    expect(all.filter((r) => r.status !== 'sent')).toEqual([]);
    expect(new Set(ackedSeqs).size).toBe(1200);
    const msgs = await readStream(nats().nc, stream);
    expect(msgs).toHaveLength(1200);
    // per aggregate, stream order is outbox seq order
    const bySeq = new Map(all.map((r) => [r.id, r.seq]));
    const last = new Map<string, number>();
    for (const m of msgs) {
      const seq = bySeq.get(m.headers['Nats-Msg-Id']!)!;
      const agg = m.headers['Aggregate-Id']!;
      expect(seq, `order of ${agg}`).toBeGreaterThan(last.get(agg) ?? 0);
      last.set(agg, seq);
      expect(m.headers['Aggregate-Version']).toBe(String(m.event.aggregateVersion));
      expect(m.headers['Occurred-At'] ?? m.event.occurredAt).toBe(m.event.occurredAt);
    }
  }, 120_000);

  it('injected faults fail exactly the rows they were injected for, and only the later rows of those aggregates wait', async () => {
    await using t = await createTestDb();
    const stream = ownStream('CTXF');
    await createStream(nats().nc, stream);
    await store(t, 300, 30);
    const before = await rows(t);
    // fail the 2nd row of a few aggregates
    const byAgg = new Map<string, Row[]>();
    for (const r of before) byAgg.set(r.aggregate_id, [...(byAgg.get(r.aggregate_id) ?? []), r]);
    const victims = new Set([...byAgg.values()].filter((_, i) => i % 5 === 0).map((rs) => rs[1]!.id));
    const random = seeded(7);
    const shuf = shuffling(createAckPublisher(nats().nc, 5000), random);
    const deps = relayDeps(t, nats().url, {
      stream,
      settings: { batch: 500, maxInFlight: 16, backoffBaseMs: 60_000, maxBackoffMs: 60_000 },
      faults: { beforePublish: (row) => (victims.has(row.id) ? new Error(`fault for ${row.id}`) : undefined) },
    });
    const r = await relayPass(deps, shuf.publisher);
    expect(shuf.problems).toEqual([]);
    expect(r.failed).toBe(victims.size);
    const after = await rows(t);
    const lastErrors = await t.client.execute('SELECT id, last_error FROM outbox WHERE attempts > 0');
    for (const x of lastErrors.rows) expect(String(x.last_error)).toBe(`fault for ${String(x.id)}`);
    expect(new Set(after.filter((x) => x.attempts > 0).map((x) => x.id))).toEqual(victims);
    // aggregates without a victim are fully sent; with one, exactly the rows before the victim are sent
    for (const [agg, rs] of byAgg) {
      const v = rs.findIndex((x) => victims.has(x.id));
      const status = rs.map((x) => after.find((y) => y.id === x.id)!.status);
      if (v < 0)
        expect(
          status.every((s) => s === 'sent'),
          agg,
        ).toBe(true);
      else expect(status, agg).toEqual(rs.map((_, i) => (i < v ? 'sent' : 'pending')));
    }
  }, 120_000);

  it('duplicates whose stored-message lookups resolve in shuffled order are each compared with their own row', async () => {
    await using t = await createTestDb();
    const stream = ownStream('CTXD');
    await createStream(nats().nc, stream);
    await store(t, 400, 50);
    const deps = relayDeps(t, nats().url, { stream, settings: { batch: 500, maxInFlight: 64, backoffBaseMs: 60_000, maxBackoffMs: 60_000 } });
    const first = await relayPass(deps, createAckPublisher(nats().nc, 5000));
    expect(first.published).toBe(400);
    // the relay "crashed" before its mark: every row pending again
    await t.client.execute("UPDATE outbox SET status = 'pending', sent_at = NULL");
    const jsm = await jetstreamManager(nats().nc);
    const random = seeded(1234);
    // one row's stored message is swapped for another row's body: exactly that row must fail
    const all = await rows(t);
    const victim = all[137]!;
    const other = all[250]!;
    const msgs = await readStream(nats().nc, stream);
    const seqOf = new Map(msgs.map((m) => [m.headers['Nats-Msg-Id']!, m.seq]));
    const storedMessage = async (seq: number): Promise<StoredMessage | 'gone' | null> => {
      await new Promise((r) => setTimeout(r, Math.floor(random() * 20)));
      const use = seq === seqOf.get(victim.id) ? seqOf.get(other.id)! : seq;
      const m = await jsm.streams.getMessage(stream.name, { seq: use });
      if (m === null) return 'gone';
      const subject = seq === seqOf.get(victim.id) ? ((await jsm.streams.getMessage(stream.name, { seq }))?.subject ?? m.subject) : m.subject;
      return { subject, data: m.data };
    };
    const shuf = shuffling(createAckPublisher(nats().nc, 5000), random);
    const again = await relayPass(deps, shuf.publisher, { storedMessage });
    expect(shuf.problems).toEqual([]);
    expect(again.failed).toBe(1);
    const after = await rows(t);
    expect(after.filter((r) => r.attempts > 0).map((r) => r.id)).toEqual([victim.id]);
    const victimRows = all.filter((r) => r.aggregate_id === victim.aggregate_id);
    for (const r of after) {
      const held = r.aggregate_id === victim.aggregate_id && r.seq >= victim.seq;
      expect(r.status, r.id).toBe(held ? 'pending' : 'sent');
    }
    expect(victimRows.length).toBeGreaterThan(0);
    expect((await readStream(nats().nc, stream)).length).toBe(400);
  }, 120_000);

  it('a connection closed with PubAcks outstanding marks none of the unacknowledged rows and touches no attempts', async () => {
    await using t = await createTestDb();
    const stream = ownStream('CTXC');
    await createStream(nats().nc, stream);
    await store(t, 600, 600);
    const nc = await natsClient(nats().url);
    const inner = createAckPublisher(nc, 5000);
    let published = 0;
    const publisher: AckPublisher = {
      publish(subject, data, headers, done, context) {
        inner.publish(subject, data, headers, done, context);
        // close the connection in the middle of the pass, with messages queued
        if (++published === 300) void nc.close();
      },
      pending: () => inner.pending(),
      close: () => inner.close(),
    };
    const deps = relayDeps(t, nats().url, { stream, settings: { batch: 600, maxInFlight: 600 } });
    const r = await relayPass(deps, publisher);
    const after = await rows(t);
    const sent = new Set(after.filter((x) => x.status === 'sent').map((x) => x.id));
    const msgs = await readStream(nats().nc, stream);
    const onStream = new Set(msgs.map((m) => m.headers['Nats-Msg-Id']!));
    // every row marked sent is on the stream, and its ack seq is its message
    for (const id of sent) expect(onStream.has(id), id).toBe(true);
    expect(r.ackedSeqs.length).toBe(sent.size);
    expect(after.every((x) => x.attempts === 0)).toBe(true);
    expect(r.brokerError ?? (sent.size === 600 ? 'all acked' : undefined)).toBeDefined();
  }, 60_000);
});
