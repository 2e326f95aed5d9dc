// What a stop on a frozen broker (SIGSTOP) leaves to the next run, started while the broker is still frozen: the
// relay's given-up PubAcks and the subscriber's answers that never got confirmed must not cost an event, store one
// twice, apply one twice, or change an aggregate's order.
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { accountCommands, creditedEvent, testSubscriber } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { appliedEvents, publishTogether, recordingDb } from '../support/recording-subscriber.ts';
import { relayDeps, runRelay } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';

/** Per aggregate, the versions in the order given. */
function versionsByAggregate(events: Array<{ aggregateId: string; aggregateVersion: number }>): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const e of events) (out[e.aggregateId] ??= []).push(e.aggregateVersion);
  return out;
}

describe('a run started right after a stop on a frozen broker', () => {
  it('a relay that gave up its PubAcks, followed by one started while the broker is still frozen: every row stored once, in aggregate order, no attempt counted', async () => {
    await using server = await startNats();
    await using t = await createTestDb();
    const stream = ownStream('GIVEUP');
    const nc = await natsClient(server.url);
    await createStream(nc, stream);

    const first = runRelay(relayDeps(t, server.url, { stream, settings: { publishTimeoutMs: 30_000 } }));
    await eventually(async () => first.relay.state() === 'connected', { what: 'the relay connected' });
    await server.pause();
    const commands = accountCommands(t.deps);
    const ids = await commands.openMany(10);
    for (const id of ids) await commands.deposit(id, 1);
    for (const id of ids) await commands.deposit(id, 2);
    await new Promise((r) => setTimeout(r, 1000)); // the first event of each account is on its way to the frozen broker
    const stopping = first.stop();
    const summary = await stopping;
    expect(summary.published + summary.duplicates).toBe(0);

    const second = runRelay(relayDeps(t, server.url, { stream }));
    await new Promise((r) => setTimeout(r, 1000)); // it connects to the frozen broker
    server.resume();
    await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === 30, { what: 'every row sent', timeoutMs: 30_000 });
    await second.stop();

    const stored = (await readStream(nc, stream)).map((e) => e.event);
    await nc.close();
    expect(stored.length).toBe(30);
    expect(new Set(stored.map((e) => e.eventId)).size).toBe(30);
    const ordered = versionsByAggregate(stored);
    for (const id of ids) expect(ordered[id], `versions of ${id} in stream order`).toEqual([1, 2, 3]);
    expect(await countRows(t.client, 'outbox', 'attempts > 0')).toBe(0);
  }, 90_000);

  it('a subscriber stopped while holding messages, followed by a run started while the broker is still frozen: each event applied once, in aggregate order', async () => {
    await using server = await startNats();
    const stream = ownStream('HANDBACK');
    const nc = await natsClient(server.url);
    await createStream(nc, stream);
    const events: IntegrationEvent[] = [];
    for (let v = 2; v < 22; v++) for (let a = 0; a < 8; a++) events.push(creditedEvent({ accountId: `hb-${a}`, owner: `o-${a}`, version: v, amountCents: v }));
    await publishTogether(nc, stream.prefix, events);
    await using sdb = await recordingDb();
    // slow writes: the run holds most of the messages when it stops
    const slow = testSubscriber('handback', async (tx, event) => {
      await new Promise((r) => setTimeout(r, 15));
      await tx.run(sql`INSERT INTO applied (event_id) VALUES (${event.eventId})`);
    });
    const options = { ackWaitMs: 3000, batch: 4 };
    const stop1 = new AbortController();
    const run1 = testRunner(sdb, server.url, slow, stream, options).run({ signal: stop1.signal, timeLimitMs: 60_000 });
    await eventually(async () => (await appliedEvents(sdb)).length >= 30, { what: 'some events applied', timeoutMs: 20_000 });
    await server.pause();
    stop1.abort();
    const started = performance.now();
    await run1;
    expect(performance.now() - started).toBeLessThan(10_000);

    const stop2 = new AbortController();
    const run2 = testRunner(sdb, server.url, slow, stream, options).run({ signal: stop2.signal, timeLimitMs: 60_000 });
    await new Promise((r) => setTimeout(r, 1000));
    server.resume();
    await eventually(async () => (await appliedEvents(sdb)).length >= events.length, { what: 'every event applied', timeoutMs: 40_000 });
    await new Promise((r) => setTimeout(r, 4000)); // past ack_wait: a redelivery would have arrived
    stop2.abort();
    await run2;
    await nc.close();

    const applied = await appliedEvents(sdb);
    expect(applied.length).toBe(events.length);
    expect(new Set(applied).size).toBe(events.length);
    const byId = new Map(events.map((e) => [e.eventId, e]));
    const ordered = versionsByAggregate(applied.map((id) => byId.get(id)!));
    for (let a = 0; a < 8; a++) expect(ordered[`hb-${a}`], `versions of hb-${a} in applied order`).toEqual(Array.from({ length: 20 }, (_, i) => i + 2));
  }, 120_000);
});
