// What the metrics claim, checked at their edges, over real libSQL files and a private nats-server.
import { createClient } from '@libsql/client';
import { describe, expect, it } from 'vitest';
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { createOutboxMetrics } from '../../src/outbox/outbox-metrics.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { postJson } from '../support/http.ts';
import { relayDeps } from '../support/relay.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { createTestService } from '../support/service.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

const sample = (text: string, series: string): number | undefined => {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

describe('metrics - outbox_relay_broker_up names the broker, not the database', () => {
  it('a relay that publishes to the broker but cannot mark rows sent (database write-locked since its first PubAcks) reports the broker up', async () => {
    await using t = await createTestDb();
    const relayClient = createClient({ url: t.url, timeout: 100 });
    const locker = createClient({ url: t.url });
    try {
      await accountCommands(t.deps).openMany(2);
      const db = createDatabase(relayClient);
      const metrics = createMetrics();
      const outbox = createOutboxMetrics(metrics);
      const stream = ownStream('UP');
      let lock: Awaited<ReturnType<typeof locker.transaction>> | undefined;
      const relay = createRelay(
        relayDeps(t, nats().url, {
          db,
          writer: createWriter(db),
          stream,
          metrics: outbox,
          faults: {
            async afterPubAcks() {
              if (lock) return;
              lock = await locker.transaction('write');
              await lock.execute("UPDATE outbox SET headers = headers WHERE id = 'none'");
            },
          },
        }),
      );
      const stop = new AbortController();
      const running = relay.run({ signal: stop.signal, timeLimitMs: 20_000 });
      try {
        // the broker took both messages: the relay demonstrably reaches it
        await eventually(async () => (await readStream(nats().nc, stream).catch(() => [])).length === 2, { what: 'both events in the stream' });
        await eventually(() => outbox.publishErrors.get('database_unavailable') >= 2, { what: 'two refused mark-sent writes' });
        const text = await metrics.render();
        expect(sample(text, 'outbox_publish_errors_total{reason="broker_unavailable"}')).toBe(0);
        // OutboxRelayDown{cause="broker_unreachable"} fires on this gauge: "the relay does not reach the broker"
        expect(sample(text, 'outbox_relay_broker_up'), 'outbox_relay_broker_up says the broker is down while only the database is').toBe(1);
      } finally {
        await lock?.rollback();
        stop.abort();
        await running;
      }
    } finally {
      relayClient.close();
      locker.close();
    }
  });
});

describe('metrics - histograms carry their labels on every series', () => {
  it('a scrape before the first request leaves no unlabelled http_request_duration_seconds series behind', async () => {
    await using s = await createTestService({ ROLES: 'api' }, { connect: undefined });
    await s.app.request('/metrics');
    await postJson(s.app, '/accounts', { owner: 'ann' });
    const text = await (await s.app.request('/metrics')).text();
    const series = text.split('\n').filter((l) => l.startsWith('http_request_duration_seconds'));
    const unlabelled = series.filter((l) => !l.includes('route='));
    expect(unlabelled, 'series with no method/route/status_class (they sum into a route="" group on dashboards)').toEqual([]);
  });
});
