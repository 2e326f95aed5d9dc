import { createClient } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.ts';
import { streamSettingsFrom } from '../../src/nats/stream-settings.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { FIXTURE_ENTRY, runtimeCommand, spawnChild, withOutput, type ChildHandle } from '../support/process.ts';
import { publishRaw } from '../support/stream.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** The stream a service uses with the default configuration (HONO_OUTBOX, subjects hono-outbox.>). */
const STREAM = streamSettingsFrom(parseConfig({}));

describe('subscriber process - order across a crash', () => {
  it('a subscriber SIGKILLed while it holds events of an aggregate (its database write-locked): the next process applies them before the later event of that aggregate', async () => {
    const nats = await startNats();
    const tmp = createTempDir();
    cleanups.push(
      () => tmp[Symbol.dispose](),
      () => nats[Symbol.asyncDispose](),
    );
    const auditUrl = `file:${join(tmp.dir, 'audit.db')}`;
    const env = {
      DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
      CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
      NATS_URL: nats.url,
      LOG_LEVEL: 'error',
      // long enough that the next process is up well before the dead one's messages are redelivered
      CONSUMER_ACK_WAIT_MS: '5000',
      DATABASE_BUSY_TIMEOUT_MS: '200',
      RELAY_BACKOFF_BASE_MS: '100',
      RELAY_MAX_BACKOFF_MS: '10000',
    };
    // the fixture service's `audit` subscriber alone, as `npm run consume -- audit` would run it
    const consumer = (): ChildHandle => {
      const { cmd, args } = runtimeCommand('node', FIXTURE_ENTRY);
      const child = spawnChild(cmd, args, { ...env, ROLES: 'consumers', CONSUMERS: 'audit' });
      cleanups.push(() => child.kill9());
      return child;
    };
    const nc = await natsClient(nats.url);
    cleanups.push(() => nc.close());
    const jsm = await jetstreamManager(nc);
    const info = () => jsm.consumers.info(STREAM.name, 'hono-outbox-audit');

    const first = consumer();
    await withOutput(
      first,
      eventually(
        async () =>
          info().then(
            () => true,
            () => false,
          ),
        { timeoutMs: 30_000, what: 'the durable consumer' },
      ),
    );
    const holder = await startWriteLockHolder(auditUrl);
    cleanups.push(() => holder[Symbol.asyncDispose]());
    await holder.lock();
    const accountId = `held-account-${process.pid}`;
    const a1 = openedEvent({ accountId });
    const [a2, a3] = [2, 3].map((version) => creditedEvent({ accountId, version }));
    const b1 = openedEvent();
    for (const e of [a1, a2!, b1]) await publishRaw(nc, STREAM, e, e.eventId);
    await eventually(async () => (await info()).num_ack_pending === 3, { timeoutMs: 10_000, what: 'three messages held' });

    await first.kill9(); // a1, a2 and b1 stay unacknowledged until their ack_wait runs out
    await publishRaw(nc, STREAM, a3!, a3!.eventId);
    await holder.release();
    const second = consumer();

    const audit = createClient({ url: auditUrl });
    cleanups.push(() => audit.close());
    const applied = async () => (await audit.execute('SELECT event_id FROM audit_log ORDER BY n')).rows.map((r) => String(r.event_id));
    await withOutput(
      second,
      eventually(async () => (await applied()).length === 4, { timeoutMs: 30_000, what: 'four events applied' }),
    );
    expect((await applied()).filter((id) => id !== b1.eventId)).toEqual([a1, a2!, a3!].map((e) => e.eventId));
    const inbox = (await audit.execute("SELECT count(*) FROM inbox WHERE consumer = 'audit'")).rows[0]![0];
    expect(Number(inbox)).toBe(4);
    await eventually(async () => (await info()).num_ack_pending === 0, { timeoutMs: 10_000, what: 'every message acknowledged' });
    expect((await second.stop('SIGTERM')).code).toBe(0);
  });
});
