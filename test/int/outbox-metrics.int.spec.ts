// The outbox and relay metrics as a scrape shows them, through a broker outage, a parked row and a locked database.
import { createClient } from '@libsql/client';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { createOutboxMetrics, registerOutboxGauges } from '../../src/outbox/outbox-metrics.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { postJson, type RequestHandler } from '../support/http.ts';
import { startNats } from '../support/nats.ts';
import { relayDeps } from '../support/relay.ts';
import { createTestService } from '../support/service.ts';
import { ownStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const PROMTOOL = '/usr/bin/promtool';

/** The value of the sample `series` (name plus labels exactly as rendered), undefined when the scrape has none. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

const scrape = async (app: RequestHandler) => (await app.request('/metrics')).text();
const errors = (reason: string) => `outbox_publish_errors_total{reason="${reason}"}`;

/** `promtool check metrics` on a scrape: its findings, empty when there are none. */
function promtoolFindings(text: string): string {
  const run = spawnSync(PROMTOOL, ['check', 'metrics'], { input: text, encoding: 'utf8' });
  return `${run.stdout}${run.stderr}${run.status === 0 ? '' : `exit ${run.status}`}`.trim();
}

/** Asserts promtool finds nothing. Where promtool is not installed and CI is not set it cannot run, so it is skipped (CI installs it). */
function expectPromtoolClean(text: string): void {
  if (!existsSync(PROMTOOL) && !process.env.CI) return;
  expect(promtoolFindings(text)).toBe('');
}

describe('outbox metrics - a scrape of a process with the relay role', () => {
  it('shows published, parked and failed rows, errors by reason, the lag, the broker going down and up, and passes promtool', async () => {
    await using own = await startNats();
    await using s = await createTestService({ ROLES: 'api,relay', NATS_URL: own.url, RELAY_MAX_ATTEMPTS: '1', ...streamEnv(ownStream('MET')) });
    const open = async () => expect((await postJson(s.app, '/accounts', { owner: 'ann' })).status).toBe(201);
    for (let i = 0; i < 3; i++) await open();
    // a row the relay cannot turn into a message (no event in its payload): parked at its first and only attempt
    await s.client.execute(`INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at)
      VALUES ('poison-metrics', 'account', 'poison', 'account.gone.v1', '{}', 'pending', 0, 0)`);

    const healthy = await eventually(
      async () => {
        const text = await scrape(s.app);
        return sample(text, 'outbox_published_total') === 3 && sample(text, 'outbox_parked_total') === 1 ? text : '';
      },
      { what: 'three rows published and one parked' },
    );
    expect(sample(healthy, 'outbox_duplicates_total')).toBe(0);
    expect(sample(healthy, 'outbox_pending_messages')).toBe(0);
    expect(sample(healthy, 'outbox_oldest_pending_age_seconds')).toBe(0);
    expect(sample(healthy, 'outbox_failed_messages')).toBe(1);
    expect(sample(healthy, 'outbox_publish_lag_seconds_count')).toBe(3);
    expect(sample(healthy, errors('invalid_event'))).toBe(1);
    expect(sample(healthy, errors('publish_failed'))).toBe(0);
    expect(sample(healthy, errors('broker_unavailable'))).toBe(0);
    expect(sample(healthy, errors('database_unavailable'))).toBe(0);
    expect(sample(healthy, 'outbox_relay_broker_up')).toBe(1);
    expect(sample(healthy, 'outbox_relay_last_pass_timestamp_seconds')).toBeGreaterThan(0);
    expect(healthy).toContain('# TYPE outbox_publish_lag_seconds histogram');
    expectPromtoolClean(healthy);

    await own.stop();
    for (let i = 0; i < 2; i++) await open();
    const down = await eventually(
      async () => {
        const text = await scrape(s.app);
        return sample(text, 'outbox_relay_broker_up') === 0 && (sample(text, errors('broker_unavailable')) ?? 0) >= 1 ? text : '';
      },
      { what: 'the relay to notice the broker is down' },
    );
    // no pass succeeds while the broker is away: the next failed attempt leaves the last pass where it was
    const lastPass = sample(down, 'outbox_relay_last_pass_timestamp_seconds');
    const downLater = await eventually(
      async () => {
        const text = await scrape(s.app);
        return sample(text, errors('broker_unavailable'))! > sample(down, errors('broker_unavailable'))! ? text : '';
      },
      { what: 'another failed attempt' },
    );
    expect(sample(downLater, 'outbox_relay_last_pass_timestamp_seconds')).toBe(lastPass);
    expect(sample(downLater, 'outbox_relay_broker_up')).toBe(0);
    expect(sample(downLater, 'outbox_pending_messages')).toBe(2);
    expect(s.service.relay?.lastSuccessfulPassAt()?.getTime()).toBe(Math.round(lastPass! * 1000));
    await eventually(async () => sample(await scrape(s.app), 'outbox_oldest_pending_age_seconds')! > 0, { what: 'the pending rows to age' });

    await own.restart();
    const back = await eventually(
      async () => {
        const text = await scrape(s.app);
        return sample(text, 'outbox_relay_broker_up') === 1 && sample(text, 'outbox_pending_messages') === 0 ? text : '';
      },
      { what: 'the backlog drained after the broker came back' },
    );
    expect(sample(back, 'outbox_published_total')).toBe(5);
    expect(sample(back, 'outbox_publish_lag_seconds_count')).toBe(5);
    expect(sample(back, 'outbox_oldest_pending_age_seconds')).toBe(0);
    expect(sample(back, 'outbox_relay_last_pass_timestamp_seconds')).toBeGreaterThan(lastPass!);
    expectPromtoolClean(back);
  });

  it('a process without the relay role has the backlog gauges but no relay gauges', async () => {
    await using s = await createTestService({ ROLES: 'api' });
    const text = await scrape(s.app);
    expect(sample(text, 'outbox_pending_messages')).toBe(0);
    expect(text).not.toContain('outbox_relay_broker_up');
    expect(text).not.toContain('outbox_relay_last_pass_timestamp_seconds');
  });
});

describe('outbox metrics - when the database fails', () => {
  it('a scrape that cannot read the outbox still renders the other metrics and leaves the backlog gauges out', async () => {
    await using t = await createTestDb();
    const metrics = createMetrics();
    const outbox = createOutboxMetrics(metrics);
    outbox.published.inc(undefined, 2);
    registerOutboxGauges(metrics, t.deps.db, t.deps.clock);
    expect(sample(await metrics.render(), 'outbox_pending_messages')).toBe(0);

    t.client.close();
    const text = await metrics.render();
    expect(sample(text, 'outbox_published_total')).toBe(2);
    for (const name of ['outbox_pending_messages', 'outbox_oldest_pending_age_seconds', 'outbox_failed_messages']) expect(sample(text, name)).toBeUndefined();
  });

  it('a database locked past the busy timeout counts database_unavailable and no pass counts as successful until it is free', async () => {
    await using t = await createTestDb();
    const relayClient = createClient({ url: t.url, timeout: 100 });
    const locker = createClient({ url: t.url });
    try {
      await accountCommands(t.deps).openMany(2);
      const db = createDatabase(relayClient);
      const metrics = createMetrics();
      const outbox = createOutboxMetrics(metrics);
      const relay = createRelay(relayDeps(t, nats().url, { db, writer: createWriter(db), stream: ownStream('MET'), metrics: outbox }));
      const lock = await locker.transaction('write');
      await lock.execute("UPDATE outbox SET headers = headers WHERE id = 'none'");
      const stop = new AbortController();
      const startedAt = Date.now();
      const running = relay.run({ signal: stop.signal, timeLimitMs: 20_000 });
      // published, but never marked sent while the lock is held
      await eventually(() => outbox.publishErrors.get('database_unavailable') >= 2, { what: 'two refused mark-sent writes' });
      expect(relay.lastSuccessfulPassAt()).toBeUndefined();
      // the relay's start stands in for a good pass it never had, so the stalled alert ages it from there
      const beforeAnyPass = sample(await metrics.render(), 'outbox_relay_last_pass_timestamp_seconds')!;
      expect(beforeAnyPass * 1000).toBeGreaterThanOrEqual(startedAt - 1);
      expect(beforeAnyPass * 1000).toBeLessThan(Date.now() - 50);

      await lock.rollback();
      const at = (await eventually(() => relay.lastSuccessfulPassAt()?.getTime(), { what: 'a pass after the lock was released' }))!;
      expect(sample(await metrics.render(), 'outbox_relay_last_pass_timestamp_seconds')).toBeGreaterThanOrEqual(at / 1000);
      stop.abort();
      await running;
    } finally {
      relayClient.close();
      locker.close();
    }
  });
});
