import type { Client } from '@libsql/client';
import { createLocalClient } from '../../src/db/local-client.ts';
import { connect } from '@nats-io/transport-node';
import { join } from 'node:path';
import { registryOf } from '../../src/compose/define-modules.ts';
import type { Database } from '../../src/db/open-database.ts';
import { createWriter, type Writer } from '../../src/db/writer.ts';
import { createConsumerRunner, type ConsumerRunnerOptions } from '../../src/inbox/consumer-runner.ts';
import type { Subscriber } from '../../src/inbox/subscriber.ts';
import { openSubscriberDatabase } from '../../src/inbox/subscriber-database.ts';
import { silentLogger } from '../../src/logger.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { createTempDir } from './db.ts';
import { FIXTURE_MIGRATIONS, fixtureModules } from './fixture/modules.ts';

/** A subscriber's own database in a temp dir; dispose closes it and removes the dir. */
export type SubscriberDb = { url: string; client: Client; db: Database; writer: Writer; close(): void; [Symbol.dispose](): void };

/**
 * A subscriber database (`await using sdb = await createSubscriberDb()`) migrated with the migrations of the fixture
 * subscriber `subscriber` (default `audit`: the inbox tables and audit_log), or with the folder `migrations`. Its
 * client waits `busyTimeoutMs` (default 5000) for another process's write lock.
 */
export async function createSubscriberDb(options: { subscriber?: string; migrations?: string; busyTimeoutMs?: number } = {}): Promise<SubscriberDb> {
  const tmp = createTempDir('hono-inbox-');
  const url = `file:${join(tmp.dir, 'subscriber.db')}`;
  const client = createLocalClient({ url, timeout: options.busyTimeoutMs ?? 5000 });
  const db = await openSubscriberDatabase(client, options.migrations ?? FIXTURE_MIGRATIONS.subscriber(options.subscriber ?? 'audit'));
  const close = () => {
    client.close();
    tmp[Symbol.dispose]();
  };
  return { url, client, db, writer: createWriter(db), close, [Symbol.dispose]: close };
}

/**
 * A consumer runner of `subscriber` over a subscriber database, with the fixture's registry and fast back-off and
 * retry delays; `over` replaces any option.
 */
export function testRunner(sdb: SubscriberDb, natsUrl: string, subscriber: Subscriber, stream: StreamSettings, over: Partial<ConsumerRunnerOptions> = {}) {
  return createConsumerRunner({
    ...subscriber,
    db: sdb.db,
    writer: sdb.writer,
    registry: registryOf(fixtureModules),
    log: silentLogger,
    metrics: createMetrics(),
    connect: () => connect(natsConnectionOptions({ servers: [natsUrl], name: `test ${subscriber.name}` })),
    stream,
    nakDelayMs: 20,
    maxNakDelayMs: 200,
    backoffBaseMs: 20,
    maxBackoffMs: 200,
    idleCheckMs: 100,
    ...over,
  });
}
