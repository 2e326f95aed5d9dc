// Duplicate PubAcks compared with the stored message, on a three-node cluster: a relay restarted after publishing rows it never
// marked verifies each duplicate with STREAM.MSG.GET while the stream leader is SIGKILLed and restarted. Every row
// must end `sent` (none parked by an error of the lookup), and the stream must hold each event once.
// Real libSQL file, a private three-node nats-server cluster (never the shared server).
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { openedEvent } from '../support/accounts.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import { eventSubject } from '../../src/nats/stream-settings.ts';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { countRows, createTestDb, MARKED_SENT } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { useNatsCluster } from '../support/use-nats-cluster.ts';
import { relayDeps } from '../support/relay.ts';
import { createStream, ownStream } from '../support/stream.ts';

const nats = useNatsCluster();

describe('relay - duplicate verification while the stream leader changes', () => {
  it('marks every re-published row sent, parks none and stores nothing twice, while the leader is SIGKILLed and restarted', { timeout: 120_000 }, async () => {
    const c = nats();
    await using t = await createTestDb();
    const stream = ownStream('DUPLEADER', { replicas: 3 });
    await createStream(c.nc, stream);
    await c.streamCaughtUp(stream.name);
    const N = 8000;
    const events = Array.from({ length: N }, (_, i) => openedEvent({ accountId: `acc-${Math.floor(i / 4)}`, owner: `owner-${i}` }));
    for (let i = 0; i < N; i += 500)
      await t.deps.writer.write((tx) => appendToOutbox(tx, events.slice(i, i + 500), { registry: t.deps.registry, now: new Date() }));
    // a relay published them all and was killed before marking any
    const js = jetstream(c.nc);
    const rows = (await t.client.execute('SELECT id, aggregate_type, aggregate_id, partition, CAST(payload AS BLOB) AS payload FROM outbox ORDER BY seq')).rows;
    for (let i = 0; i < rows.length; i += 1000)
      await Promise.all(
        rows.slice(i, i + 1000).map((r) =>
          js.publish(
            eventSubject(stream.prefix, String(r.aggregate_type), String(r.aggregate_id), Number(r.partition)),
            new Uint8Array(r.payload as ArrayBuffer),
            {
              msgID: String(r.id),
            },
          ),
        ),
      );
    await c.streamCaughtUp(stream.name);

    const stop = new AbortController();
    const relay = createRelay(
      relayDeps(t, c.urls, {
        stream,
        connect: () => connect(natsConnectionOptions({ servers: c.urls.split(','), name: 'cluster relay' })),
        settings: { batch: 200, maxInFlight: 64, maxAttempts: 2, backoffBaseMs: 20, maxBackoffMs: 200, publishTimeoutMs: 1000 },
      }),
    );
    const running = relay.run({ signal: stop.signal, timeLimitMs: 90_000 });
    try {
      // marked in place or recorded in outbox_sent (a backlog's marks are folded in once it is drained): the leader dies mid-drain
      await eventually(async () => (await countRows(t.client, 'outbox', MARKED_SENT)) > 300, { timeoutMs: 45_000, what: 'the relay under way' });
      const leader = await c.streamLeader(stream.name);
      await c.kill(leader);
      expect(await countRows(t.client, 'outbox', `NOT ${MARKED_SENT}`), 'rows left to verify when the leader died').toBeGreaterThan(0);
      await new Promise((r) => setTimeout(r, 2000));
      await c.restart(leader);
      await eventually(async () => (await countRows(t.client, 'outbox', "status = 'pending'")) === 0, { timeoutMs: 60_000, what: 'no row pending' });
    } finally {
      stop.abort();
      await running;
    }
    const failed = (await t.client.execute("SELECT count(*) AS n, max(last_error) AS e FROM outbox WHERE status = 'failed'")).rows[0]!;
    expect(Number(failed.n), `parked: ${String(failed.e)}`).toBe(0);
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(N);
    await c.streamCaughtUp(stream.name);
    const { jetstreamManager } = await import('@nats-io/jetstream');
    expect((await (await jetstreamManager(c.nc)).streams.info(stream.name)).state.messages).toBe(N);
  });
});
