import { describe, expect, it } from 'vitest';
import { compactOutbox } from '../../src/outbox/compact-outbox.ts';
import { countRows } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { postJson } from '../support/http.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { createTestService } from '../support/service.ts';
import { ownStream, readStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** The service environment of a broker of this file's and a stream of its own. */
const brokerEnv = () => ({ NATS_URL: nats().url, ...streamEnv(ownStream('OPS')) });
const open = (app: Parameters<typeof postJson>[0]) => postJson(app, '/accounts', { owner: 'ann' });

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  if (!line) throw new Error(`metric ${name} missing from:\n${text}`);
  return Number(line.split(' ')[1]);
}

// The admin routes (failed outbox rows, dead letters) are tested in admin.int.spec.ts.
describe('ops - metrics', () => {
  it('/metrics exposes the documented names with values that match a known workload', async () => {
    await using s = await createTestService({ ROLES: 'api,relay', ...brokerEnv() });
    for (let i = 0; i < 3; i++) expect((await open(s.app)).status).toBe(201);
    await s.client.execute(
      `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, attempts, last_error, occurred_at, available_at)
       VALUES ('parked-1', 'account', 'x', 'account.gone.v1', '{}', 'failed', 5, 'not registered', 0, 0)`,
    );
    const text = await eventually(
      async () => {
        const body = await (await s.app.request('/metrics')).text();
        return metric(body, 'outbox_published_total') === 3 ? body : '';
      },
      { what: 'three events published' },
    );
    expect(metric(text, 'outbox_published_total')).toBe(3);
    expect(metric(text, 'outbox_duplicates_total')).toBe(0);
    expect(metric(text, 'outbox_pending_messages')).toBe(0);
    expect(metric(text, 'outbox_oldest_pending_age_seconds')).toBe(0);
    expect(metric(text, 'outbox_failed_messages')).toBe(1);
    expect(metric(text, 'outbox_publish_lag_seconds_count')).toBe(3);
    expect(text).toContain('# TYPE outbox_publish_errors_total counter');
    expect(text).toContain('# TYPE outbox_publish_lag_seconds histogram');
    const stats = await (await s.app.request('/outbox/stats')).json();
    expect(stats).toEqual({ pending: 0, failed: 1, sent: 3, oldestPendingAgeMs: 0 });
  });
});

describe('relay - broker outages', () => {
  it('commands commit while the broker is down, rows stay pending with attempts untouched, and the backlog drains after it returns', async () => {
    await using own = await startNats();
    const stream = ownStream('OUT');
    await using s = await createTestService({ ROLES: 'api,relay', NATS_URL: own.url, ...streamEnv(stream) });
    const sent = () => countRows(s.client, 'outbox', "status = 'sent'");
    expect((await open(s.app)).status).toBe(201);
    await eventually(async () => (await sent()) === 1, { what: 'the first event sent' });
    await own.stop();

    for (let i = 0; i < 20; i++) expect((await open(s.app)).status).toBe(201);
    // several passes and back-offs happen while the broker is away
    await eventually(() => s.service.metrics.counter('outbox_publish_errors_total', '').get({ reason: 'broker_unavailable' }) >= 3, { what: 'publish errors' });
    const during = await s.client.execute("SELECT count(*), max(attempts) FROM outbox WHERE status = 'pending'");
    expect(Number(during.rows[0]![0])).toBe(20);
    expect(Number(during.rows[0]![1])).toBe(0);
    expect((await s.app.request('/ready')).status).toBe(200);

    await own.restart();
    await eventually(async () => (await sent()) === 21, { what: 'the backlog drained' });
    const nc = await natsClient(own.url);
    const msgs = await readStream(nc, stream);
    await nc.close();
    expect(new Set(msgs.map((m) => m.headers['Nats-Msg-Id'])).size).toBe(21);
    expect(msgs).toHaveLength(21);
  });

  it('a relay started while the broker is unreachable keeps retrying and publishes once it appears', async () => {
    await using own = await startNats();
    await own.stop();
    await using s = await createTestService({ ROLES: 'api,relay', NATS_URL: own.url, ...streamEnv(ownStream('LATE')) });
    expect((await open(s.app)).status).toBe(201);
    await eventually(() => s.service.relay?.state() === 'unavailable', { what: 'the relay to notice the outage' });
    await own.restart();
    await eventually(async () => (await countRows(s.client, 'outbox', "status = 'sent'")) === 1, { what: 'the event sent' });
  });
});

describe('outbox - compaction', () => {
  it('deletes only sent rows older than the cutoff, in batches, and never pending or failed rows', async () => {
    await using s = await createTestService({ ROLES: 'api' });
    const old = 1_000;
    const recent = Date.now();
    const values: string[] = [];
    for (let i = 0; i < 25; i++) values.push(`('old-sent-${i}', 'account', 'a${i}', 'account.opened.v1', '{}', 'sent', 0, 0, ${old})`);
    for (let i = 0; i < 3; i++) values.push(`('new-sent-${i}', 'account', 'b${i}', 'account.opened.v1', '{}', 'sent', 0, 0, ${recent})`);
    for (let i = 0; i < 4; i++) values.push(`('old-pending-${i}', 'account', 'c${i}', 'account.opened.v1', '{}', 'pending', 0, 0, NULL)`);
    for (let i = 0; i < 2; i++) values.push(`('old-failed-${i}', 'account', 'd${i}', 'account.opened.v1', '{}', 'failed', 0, 0, NULL)`);
    await s.client.execute(
      `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at) VALUES ${values.join(',')}`,
    );
    const progress: number[] = [];
    const result = await compactOutbox(s.deps, { cutoffMs: recent - 60_000, batch: 10, onBatch: (p) => progress.push(p.deleted) });
    expect(result).toEqual({ deleted: 25, batches: 3 });
    expect(progress).toEqual([10, 20, 25]);
    const left = await s.client.execute('SELECT status, count(*) FROM outbox GROUP BY status ORDER BY status');
    expect(left.rows.map((r) => [r[0], Number(r[1])])).toEqual([
      ['failed', 2],
      ['pending', 4],
      ['sent', 3],
    ]);
  });
});
