// Rows a script stored with bytes that are no text (a non-UTF-8 id, aggregate_id or payload, a blob id)
// in the middle of a backlog the relay drains with marks recorded apart in outbox_sent. Such rows must be parked,
// never recorded as sent; later rows of other aggregates keep flowing, later rows of the bad row's aggregate wait,
// and the stats stay sane throughout.
import { describe, expect, it } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { readOutboxStats, type OutboxStats } from '../../src/outbox/outbox-stats.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { insertScriptRow, TextBytes, textWithBytes } from '../support/stored-row.ts';
import { freshStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const encoder = new TextEncoder();

describe('undecodable rows inside a recorded backlog', () => {
  it('parks them, never records them in outbox_sent, holds their aggregate, publishes the rest once in order', { timeout: 20_000 }, async () => {
    await using t = await createTestDb();
    // every write to outbox_sent, kept apart from the relay (a table and trigger of this test only)
    await t.client.execute('CREATE TABLE recorded_log (seq INTEGER, id_hex TEXT)');
    await t.client.execute('CREATE TRIGGER recorded_inserts AFTER INSERT ON outbox_sent BEGIN INSERT INTO recorded_log VALUES (NEW.seq, hex(NEW.id)); END');

    const AGGS = 8;
    const VERSIONS = 6;
    const aggs = Array.from({ length: AGGS }, (_, i) => `acc-bad-${i}-${crypto.randomUUID().slice(0, 8)}`);
    // bad rows: [aggregate index, version] → the column override
    const badId = { agg: 0, v: 2 };
    const badPayload = { agg: 1, v: 3 };
    const blobPayload = { agg: 2, v: 2 };
    const blobId = { agg: 3, v: 3 };
    const badAggregate = { agg: 4, v: 2 }; // this and the later rows of agg 4 carry the same undecodable aggregate_id
    const badAggregateBytes = textWithBytes(aggs[4]!, 0xe9);
    const expectedGood: IntegrationEvent[] = [];
    const heldIds: string[] = [];
    const badEventIds: string[] = [];
    for (let v = 1; v <= VERSIONS; v++) {
      for (let a = 0; a < AGGS; a++) {
        const e: IntegrationEvent = v === 1 ? openedEvent({ accountId: aggs[a] }) : creditedEvent({ accountId: aggs[a], version: v });
        const is = (b: { agg: number; v: number }) => b.agg === a && b.v === v;
        let over: Record<string, unknown> = {};
        if (is(badId)) over = { id: textWithBytes(e.eventId, 0xe9) };
        else if (is(badPayload)) {
          const text = JSON.stringify(e).replace('"owner":"ann"', '"owner":"annZ"');
          const bytes = encoder.encode(text);
          bytes[bytes.indexOf(0x5a /* Z */)] = 0xe9;
          over = { payload: new TextBytes(bytes) };
        } else if (is(blobPayload)) over = { payload: new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]) };
        else if (is(blobId)) over = { id: encoder.encode(e.eventId) };
        else if (a === badAggregate.agg && v >= badAggregate.v) over = { aggregate_id: badAggregateBytes };
        await insertScriptRow(t, e, over);
        const bad = is(badId) || is(badPayload) || is(blobPayload) || is(blobId) || (a === badAggregate.agg && v === badAggregate.v);
        const heldBehind =
          (a === badId.agg && v > badId.v) ||
          (a === badPayload.agg && v > badPayload.v) ||
          (a === blobPayload.agg && v > blobPayload.v) ||
          (a === blobId.agg && v > blobId.v) ||
          (a === badAggregate.agg && v > badAggregate.v);
        if (bad) badEventIds.push(e.eventId);
        else if (heldBehind) heldIds.push(e.eventId);
        else expectedGood.push(e);
      }
    }
    const total = AGGS * VERSIONS;
    const stream = await freshStream(nats().nc, 'BADBYTES');
    const statsSeen: OutboxStats[] = [];
    const deps = relayDeps(t, nats().url, {
      stream,
      settings: { batch: 4, maxAttempts: 1 },
      faults: {
        afterPubAcks: async () => {
          statsSeen.push(await readOutboxStats(t.deps.db, new Date()));
        },
      },
    });
    await drainOutbox(deps);

    // recording really happened while draining
    expect(await countRows(t.client, 'recorded_log')).toBeGreaterThan(0);
    // no bad row was ever recorded as sent
    const recordedBad = await t.client.execute(
      "SELECT count(*) AS n FROM recorded_log r JOIN outbox o ON o.seq = r.seq WHERE o.status = 'failed' OR typeof(o.id) != 'text' OR hex(o.id) != r.id_hex",
    );
    expect(Number(recordedBad.rows[0]!.n), 'a parked or undecodable row recorded in outbox_sent').toBe(0);

    // 5 parked; the rows behind them pending; the rest sent, entries folded
    expect(await countRows(t.client, 'outbox', "status = 'failed'")).toBe(5);
    expect(await countRows(t.client, 'outbox', "status = 'pending'")).toBe(heldIds.length);
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(total - 5 - heldIds.length);
    expect(await countRows(t.client, 'outbox_sent')).toBe(0);
    for (const id of heldIds) {
      const r = await t.client.execute({ sql: "SELECT status FROM outbox WHERE typeof(id) = 'text' AND id = ?", args: [id] });
      expect(r.rows[0]?.status, `held row ${id}`).toBe('pending');
    }

    const msgs = await readStream(nats().nc, stream);
    const ids = msgs.map((m) => m.headers['Nats-Msg-Id']);
    expect(new Set(ids).size, 'a message stored twice').toBe(ids.length);
    expect(new Set(ids)).toEqual(new Set(expectedGood.map((e) => e.eventId)));
    // per aggregate, versions ascending without gaps from 1
    const byAgg = new Map<string, number[]>();
    for (const m of msgs) byAgg.set(m.event.aggregateId, [...(byAgg.get(m.event.aggregateId) ?? []), m.event.aggregateVersion]);
    for (const [agg, versions] of byAgg) expect(versions, agg).toEqual(versions.map((_, i) => i + 1));

    for (const s of statsSeen) {
      expect(s.pending).toBeGreaterThanOrEqual(0);
      expect(s.sent).toBeGreaterThanOrEqual(0);
      expect(s.failed).toBeGreaterThanOrEqual(0);
      expect(s.pending + s.failed + s.sent).toBe(total);
    }
    expect(await readOutboxStats(t.deps.db, new Date())).toMatchObject({ pending: heldIds.length, failed: 5, sent: total - 5 - heldIds.length });
  });
});
