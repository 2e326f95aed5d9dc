// The subscriber side of /metrics: what the runner counts and times, and the backlog gauges read from the broker and
// the subscriber's database before each scrape (registerSubscriberGauges over createSubscriberStatus).
import { spawnSync } from 'node:child_process';
import { connect } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { defineSubscriber } from '../../src/inbox/subscriber.ts';
import { createMetrics, type Metrics } from '../../src/metrics/metrics.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { createSubscriberStatus, DEAD_LETTER_COUNT_CAP, registerSubscriberGauges } from '../../src/ops/subscriber-status.ts';
import { creditedEvent, openedEvent, testSubscriber } from '../support/accounts.ts';
import { createSubscriberDb, type SubscriberDb, testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import type { FixtureEvents } from '../support/fixture/modules.ts';
import { balances } from '../support/fixture/subscribers/balances/subscriber.ts';
import { startNats } from '../support/nats.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** The value of `name{consumer="…"}` in a render, undefined when the series is absent. */
function sample(text: string, name: string, consumer: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{consumer="${consumer}"} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

const BACKLOG = ['inbox_consumer_pending_messages', 'inbox_consumer_ack_pending_messages', 'inbox_dead_letter_messages'] as const;

/** The backlog gauges of `consumer` in a render of `metrics`. */
async function backlog(metrics: Metrics, consumer: string) {
  const text = await metrics.render();
  const [pending, ackPending, deadLetters] = BACKLOG.map((name) => sample(text, name, consumer));
  return { pending, ackPending, deadLetters };
}

/** A status reader of one subscriber (durable = its name) at `url`, with its gauges registered on `metrics`. */
function watch(
  metrics: Metrics,
  url: string,
  stream: StreamSettings,
  sub: { name: string; sdb: SubscriberDb },
  o: { ttlMs?: number; timeoutMs?: number; waitMs?: number } = {},
) {
  const reader = createSubscriberStatus({
    connect: () => connect(natsConnectionOptions({ servers: [url], name: 'test status' })),
    stream: stream.name,
    subscribers: [{ name: sub.name, durable: sub.name, db: sub.sdb.db, state: () => 'connected', databaseState: () => 'ok' }],
    ttlMs: o.ttlMs ?? 0,
    ...(o.timeoutMs ? { timeoutMs: o.timeoutMs } : {}),
  });
  registerSubscriberGauges(metrics, reader, o.waitMs ? { waitMs: o.waitMs } : {});
  return reader;
}

describe('subscriber metrics - what the runner counts', () => {
  it('times each handled event, counts events of types it does not handle as ignored, and renders what promtool accepts', async () => {
    const stream = await freshStream(nats().nc, 'SM');
    const opened = openedEvent({ owner: 'metrics-owner' });
    await publishEvents(nats().nc, stream, [opened, creditedEvent({ owner: 'metrics-owner' }), openedEvent({ owner: 'metrics-owner' })]);
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const openings = defineSubscriber<FixtureEvents>()({ name: 'openings', on: { 'account.opened.v1': (tx, e) => balances.handle(tx, e) } });
    const metrics = createMetrics();
    const reader = watch(metrics, nats().url, stream, { name: 'openings', sdb });

    const summary = await testRunner(sdb, nats().url, openings, stream, { metrics }).run({ untilIdle: true, timeLimitMs: 20_000 });

    expect(summary).toMatchObject({ processed: 2, ignored: 1 });
    const text = await metrics.render();
    await reader.close();
    expect(BACKLOG.map((name) => sample(text, name, 'openings'))).toEqual([0, 0, 0]);
    expect(sample(text, 'inbox_processed_total', 'openings')).toBe(2);
    expect(sample(text, 'inbox_ignored_total', 'openings')).toBe(1);
    expect(sample(text, 'inbox_dead_letters_total', 'openings')).toBe(0);
    expect(sample(text, 'inbox_handler_duration_seconds_count', 'openings')).toBe(2);
    expect(sample(text, 'inbox_handler_duration_seconds_sum', 'openings')).toBeGreaterThan(0);
    expect(text).toContain('inbox_handler_duration_seconds_bucket{consumer="openings",le="+Inf"} 2');

    const promtool = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    // Without promtool on the machine only this check is skipped; CI installs it, so there a missing one fails.
    if ((promtool.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT' && !process.env.CI) return;
    expect({ status: promtool.status, output: `${promtool.stdout}${promtool.stderr}` }).toEqual({ status: 0, output: '' });
  });
});

describe('subscriber metrics - backlog gauges', () => {
  it("reports the durable consumer's pending and ack-pending messages and the dead letters at the next scrape", async () => {
    const stream = await freshStream(nats().nc, 'SM');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const poison = creditedEvent({ owner: 'backlog-owner' });
    const picky = testSubscriber('picky', async (tx, event) => {
      if (event.eventId === poison.eventId) throw new Error('cannot apply this one');
      await balances.handle(tx, event);
    });
    const metrics = createMetrics();
    const reader = watch(metrics, nats().url, stream, { name: 'picky', sdb });
    const runner = () => testRunner(sdb, nats().url, picky, stream, { metrics, maxDeliver: 1 });
    await runner().run({ untilIdle: true, timeLimitMs: 20_000 }); // creates the durable consumer
    expect(await backlog(metrics, 'picky')).toEqual({ pending: 0, ackPending: 0, deadLetters: 0 });

    // the poison first: whatever the batches, each event's handler runs once
    await publishEvents(nats().nc, stream, [poison, openedEvent({ owner: 'backlog-owner' }), creditedEvent({ owner: 'backlog-owner' })]);
    expect(await backlog(metrics, 'picky')).toEqual({ pending: 3, ackPending: 0, deadLetters: 0 });

    expect(await runner().run({ untilIdle: true, timeLimitMs: 20_000 })).toMatchObject({ processed: 2, deadLettered: 1 });
    expect(await backlog(metrics, 'picky')).toEqual({ pending: 0, ackPending: 0, deadLetters: 1 });
    const text = await metrics.render();
    expect(sample(text, 'inbox_dead_letters_total', 'picky')).toBe(1);
    expect(sample(text, 'inbox_handler_duration_seconds_count', 'picky')).toBe(3);
    await reader.close();
  });

  it('reports a dead-letter count past the cap as the cap', async () => {
    const stream = await freshStream(nats().nc, 'SM');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    await sdb.client.execute({
      sql: `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
            INSERT INTO dead_letters (event_id, consumer, subject, headers, payload, error, deliveries, dead_at)
            SELECT 'dead-' || i, 'hoarder', 's', '{}', 'x', 'failed', 1, 0 FROM n`,
      args: [DEAD_LETTER_COUNT_CAP + 5],
    });
    const metrics = createMetrics();
    const reader = watch(metrics, nats().url, stream, { name: 'hoarder', sdb });

    // its durable consumer does not exist: the broker cannot tell its backlog, the database still counts
    expect(await backlog(metrics, 'hoarder')).toEqual({ pending: undefined, ackPending: undefined, deadLetters: DEAD_LETTER_COUNT_CAP });
    await reader.close();
  });

  it('leaves the broker counts out of a scrape while the broker is down, rather than showing the last ones, and shows them again once it is back', async () => {
    await using server = await startNats();
    const nc = await connect({ servers: [server.url] });
    const stream = await freshStream(nc, 'SM');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const metrics = createMetrics();
    const reader = watch(metrics, server.url, stream, { name: 'balances-down', sdb }, { timeoutMs: 300, waitMs: 10_000 });
    await testRunner(sdb, server.url, { ...balances, name: 'balances-down' }, stream, { metrics }).run({ untilIdle: true, timeLimitMs: 20_000 });
    await publishEvents(nc, stream, [openedEvent({ owner: 'down-owner' })]);
    await nc.close();
    expect(await backlog(metrics, 'balances-down')).toEqual({ pending: 1, ackPending: 0, deadLetters: 0 });

    await server.stop();
    expect(await backlog(metrics, 'balances-down')).toEqual({ pending: undefined, ackPending: undefined, deadLetters: 0 });

    await server.restart();
    await eventually(async () => (await backlog(metrics, 'balances-down')).pending === 1, { what: 'the pending count after the broker came back' });
    await reader.close();
  });

  it('answers a scrape without the backlog series, instead of waiting, when the broker does not answer in time', async () => {
    await using server = await startNats();
    const nc = await connect({ servers: [server.url] });
    const stream = await freshStream(nc, 'SM');
    await nc.close();
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const metrics = createMetrics();
    // the reader would wait 30 s for the broker; a scrape waits 1 s for the reader
    const reader = watch(metrics, server.url, stream, { name: 'slow', sdb }, { timeoutMs: 30_000, waitMs: 1000 });
    await testRunner(sdb, server.url, { ...balances, name: 'slow' }, stream, { metrics }).run({ untilIdle: true, timeLimitMs: 20_000 });
    expect(await backlog(metrics, 'slow')).toEqual({ pending: 0, ackPending: 0, deadLetters: 0 });

    // a scrape it sees without the series, well within the reader's 30 s, did not wait for the frozen broker
    await server.pause();
    try {
      const series = async () => Object.values(await backlog(metrics, 'slow')).filter((v) => v !== undefined);
      await eventually(async () => (await series()).length === 0, { what: 'a scrape without the backlog series' });
    } finally {
      server.resume();
    }
    await reader.close();
  });
});
