import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { describe, expect, it } from 'vitest';
import { defineModules, findSubscriber, UnknownSubscriberError } from '../../src/compose/define-modules.ts';
import { defineEvents } from '../../src/events/define-events.ts';
import { defineSubscriber } from '../../src/inbox/subscriber.ts';
import { creditedEvent, openedEvent, testSubscriber } from '../support/accounts.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { countRows, createTestApp } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { fixtureEvents, fixtureModules, type FixtureEvents } from '../support/fixture/modules.ts';
import { audit } from '../support/fixture/subscribers/audit/subscriber.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';
import { postJson } from '../support/http.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { freshStream, ownStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

const consumerExists = (stream: string, name: string) => async () =>
  (await jetstreamManager(nats().nc)).consumers.info(stream, name).then(
    () => true,
    () => false,
  );

describe('consumers - end to end', () => {
  it('applies every command sent over HTTP exactly once in both subscribers, even when they start before the stream exists', async () => {
    const stream = ownStream('E2E');
    await using t = await createTestApp();
    await using balancesDb = await createSubscriberDb({ subscriber: 'balances' });
    await using auditDb = await createSubscriberDb({ subscriber: 'audit' });
    // Both runners start first: they create the stream and their durable consumers themselves.
    const stop = new AbortController();
    const balancesRun = testRunner(balancesDb, nats().url, balances, stream).run({ signal: stop.signal, timeLimitMs: 40_000 });
    const auditRun = testRunner(auditDb, nats().url, audit, stream).run({ signal: stop.signal, timeLimitMs: 40_000 });

    const opened: Array<{ accountId: string; owner: string; cents: number }> = [];
    for (let i = 0; i < 12; i++) {
      const owner = i % 2 === 0 ? 'alice' : 'bob';
      const res = await postJson(t.app, '/accounts', { owner });
      expect(res.status).toBe(201);
      const { accountId } = (await res.json()) as { accountId: string };
      const cents = 100 + i;
      expect((await postJson(t.app, `/accounts/${accountId}/deposit`, { amountCents: cents })).status).toBe(200);
      opened.push({ accountId, owner, cents });
    }
    const closed = [opened[0]!, opened[1]!, opened[2]!, opened[5]!];
    for (const a of closed) expect((await t.app.request(`/accounts/${a.accountId}/close`, { method: 'POST' })).status).toBe(200);
    const events = 2 * opened.length + closed.length;
    await eventually(consumerExists(stream.name, 'audit'), { what: 'the runners to create the stream' });
    const relayed = await drainOutbox(relayDeps(t, nats().url, { stream }));
    expect(relayed.published).toBe(events);

    await eventually(async () => (await countRows(balancesDb.client, 'inbox')) >= events && (await countRows(auditDb.client, 'inbox')) >= events, {
      what: 'both subscribers to apply every event',
    });
    stop.abort();
    const [b, a] = await Promise.all([balancesRun, auditRun]);
    expect(b).toMatchObject({ processed: events, deadLettered: 0 });
    expect(a).toMatchObject({ processed: events, deadLettered: 0 });

    for (const owner of ['alice', 'bob']) {
      const mine = opened.filter((o) => o.owner === owner);
      expect(await readOwnerBalance(balancesDb.db, owner)).toEqual({
        owner,
        accountsOpened: mine.length,
        accountsClosed: closed.filter((o) => o.owner === owner).length,
        creditedCents: mine.reduce((sum, o) => sum + o.cents, 0),
      });
    }
    expect(await (await t.app.request(`/accounts/${opened[3]!.accountId}`)).json()).toMatchObject({
      balanceCents: opened[3]!.cents,
      status: 'open',
      version: 2,
    });
    expect(await countRows(auditDb.client, 'audit_log')).toBe(events);
    for (const o of opened) expect(await countRows(auditDb.client, 'audit_log', 'account_id = ?', [o.accountId])).toBe(closed.includes(o) ? 3 : 2);
    const versions = await auditDb.client.execute({
      sql: 'SELECT aggregate_version FROM audit_log WHERE account_id = ? ORDER BY n',
      args: [opened[0]!.accountId],
    });
    expect(versions.rows.map((r) => Number(r[0]))).toEqual([1, 2, 3]);
  });
});

describe('consumers - durable consumer and registry', () => {
  it('creates the durable pull consumer with explicit acks, the aggregate filter, ack_wait and unlimited broker redelivery, and updates a consumer that limits it', async () => {
    const stream = ownStream('CFG');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    await testRunner(sdb, nats().url, balances, stream).run({ untilIdle: true, timeLimitMs: 20_000 });
    const jsm = await jetstreamManager(nats().nc);
    const created = (await jsm.consumers.info(stream.name, 'balances')).config;
    expect(created).toMatchObject({
      durable_name: 'balances',
      ack_policy: 'explicit',
      deliver_policy: 'all',
      filter_subject: `${stream.prefix}.account.>`,
      ack_wait: nanos(30_000),
      max_deliver: -1, // the inbox dead-letters by itself; the broker must never drop a message silently
    });

    // a consumer left with a delivery limit (by an operator or an older version) loses it
    await jsm.consumers.update(stream.name, 'balances', { max_deliver: 10 });
    await testRunner(sdb, nats().url, balances, stream, { ackWaitMs: 5000, maxDeliver: 4 }).run({ untilIdle: true, timeLimitMs: 20_000 });
    expect((await jsm.consumers.info(stream.name, 'balances')).config).toMatchObject({ ack_wait: nanos(5000), max_deliver: -1 });
  });

  it('names its durable consumer durableName when given (the service uses <service>-<subscriber>)', async () => {
    const stream = ownStream('DUR');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    await testRunner(sdb, nats().url, balances, stream, { durableName: 'fixture-balances' }).run({ untilIdle: true, timeLimitMs: 20_000 });
    const listed = await (await jetstreamManager(nats().nc)).consumers.list(stream.name).next();
    const names = listed.filter((c) => c.config.durable_name).map((c) => c.name); // not a check's ephemeral consumer
    expect(names).toEqual(['fixture-balances']);
  });

  it('applies an event delivered more often than max_deliver by processes that died before applying it: only handler failures lead to a dead letter', async () => {
    const stream = ownStream('MAXD');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const settings = { ackWaitMs: 1000, maxDeliver: 2 };
    await testRunner(sdb, nats().url, balances, stream, settings).run({ untilIdle: true, timeLimitMs: 20_000 });
    await publishEvents(nats().nc, stream, [creditedEvent({ owner: 'crashy', amountCents: 700 })]);
    // three processes in a row take the message and die before applying it (nothing acks it)
    const consumer = await jetstream(nats().nc).consumers.get(stream.name, 'balances');
    for (let i = 1; i <= 3; i++) {
      const got = await consumer.next({ expires: 5000 });
      expect(got?.info.deliveryCount).toBe(i);
      await new Promise((r) => setTimeout(r, 1200)); // ack_wait passes
    }
    await testRunner(sdb, nats().url, balances, stream, settings).run({ untilIdle: true, timeLimitMs: 20_000 });
    expect(await readOwnerBalance(sdb.db, 'crashy')).toMatchObject({ creditedCents: 700 });
    expect(await countRows(sdb.client, 'dead_letters')).toBe(0);
  });

  it('acknowledges the registered types a subscriber does not handle without an inbox row, and counts them as ignored', async () => {
    const stream = await freshStream(nats().nc, 'IGN');
    await using sdb = await createSubscriberDb({ subscriber: 'balances' });
    const openings = defineSubscriber<FixtureEvents>()({ name: 'openings', on: { 'account.opened.v1': (tx, e) => balances.handle(tx, e) } });
    await publishEvents(nats().nc, stream, [openedEvent({ owner: 'ign' }), creditedEvent({ owner: 'ign', amountCents: 5 }), openedEvent({ owner: 'ign' })]);
    const summary = await testRunner(sdb, nats().url, openings, stream).run({ untilIdle: true, timeLimitMs: 20_000 });
    expect(summary).toMatchObject({ processed: 2, ignored: 1, deadLettered: 0 });
    expect(await readOwnerBalance(sdb.db, 'ign')).toMatchObject({ accountsOpened: 2, creditedCents: 0 });
    expect(await countRows(sdb.client, 'inbox')).toBe(2);
  });

  it('finds a subscriber of a composition by name and names the known ones for an unknown name', () => {
    expect(findSubscriber(fixtureModules, 'balances')).toBe(balances);
    expect(findSubscriber(fixtureModules, 'audit').types).toEqual(Object.keys(fixtureEvents));
    expect(() => findSubscriber(fixtureModules, 'billing')).toThrow(UnknownSubscriberError);
    expect(() => findSubscriber(fixtureModules, 'toString')).toThrow('known: balances, audit');
  });

  it('refuses a composition with a name listed twice, a subscriber of an unregistered type or a subscriber name that is no token; accepts an empty one', () => {
    const events = defineEvents({ ...fixtureEvents });
    expect(() => defineModules({ events, contexts: [], subscribers: [balances, balances] })).toThrow('subscriber balances is listed twice');
    expect(() => defineModules({ events: defineEvents({}), contexts: [], subscribers: [audit] })).toThrow(
      'audit handles account.opened.v1, which is not in the event catalog',
    );
    expect(() => defineModules({ events, contexts: [], subscribers: [testSubscriber('a.b', async () => undefined)] })).toThrow(/must be letters, digits/);
    const empty = defineModules({ events: defineEvents({}), contexts: [], subscribers: [] });
    expect(empty.subscribers).toEqual([]);
    expect(() => findSubscriber(empty, 'audit')).toThrow(UnknownSubscriberError);
  });
});

describe('consumers - a stream or consumer that disappeared', () => {
  for (const deleted of ['stream', 'durable consumer'] as const) {
    it(`re-creates its ${deleted} when an operator deletes it while the runner runs, and applies the events published afterwards`, async () => {
      const stream = ownStream('GONE');
      await using sdb = await createSubscriberDb({ subscriber: 'balances' });
      const jsm = await jetstreamManager(nats().nc);
      const exists = consumerExists(stream.name, 'balances');
      const stop = new AbortController();
      const runner = testRunner(sdb, nats().url, balances, stream);
      const running = runner.run({ signal: stop.signal, timeLimitMs: 40_000 });
      await eventually(exists, { what: 'the stream and the consumer' });
      await publishEvents(nats().nc, stream, [creditedEvent({ owner: 'gone-owner', amountCents: 1 })]);
      await eventually(async () => (await readOwnerBalance(sdb.db, 'gone-owner')).creditedCents === 1, { what: 'the first event applied' });

      if (deleted === 'stream') await jsm.streams.delete(stream.name);
      else await jsm.consumers.delete(stream.name, 'balances');
      await eventually(exists, { what: `the ${deleted} re-created` });
      await publishEvents(nats().nc, stream, [creditedEvent({ owner: 'gone-owner', amountCents: 2 })]);
      await eventually(async () => (await readOwnerBalance(sdb.db, 'gone-owner')).creditedCents === 3, { what: 'the later event applied' });
      stop.abort();
      const summary = await running;

      expect(summary.brokerErrors).toBeGreaterThanOrEqual(1);
      expect(await countRows(sdb.client, 'inbox')).toBe(2);
      expect(runner.state()).toBe('connected');
    });
  }
});

describe('consumers - a broker too old for the composition', () => {
  it('refuses to start, by type and naming the cause, a subscriber whose events span two aggregate types on a broker without multi-filter consumers', async () => {
    // nats-server 2.9 (the one these tests start) has no filter_subjects: the consumer can never be created
    const { z } = await import('zod');
    const { createEventRegistry } = await import('../../src/events/registry.ts');
    const { UnsafeConsumerConfigError } = await import('../../src/nats/ensure-consumer.ts');
    const events = defineEvents({ 'a.done.v1': { aggregate: 'a', data: z.object({}) }, 'b.done.v1': { aggregate: 'b', data: z.object({}) } });
    const both = defineSubscriber<typeof events>()({ name: 'both', on: { 'a.done.v1': async () => {}, 'b.done.v1': async () => {} } });
    await using sdb = await createSubscriberDb();
    const run = testRunner(sdb, nats().url, both, ownStream('OLD'), { registry: createEventRegistry(events) }).run({ timeLimitMs: 15_000 });
    await expect(run).rejects.toBeInstanceOf(UnsafeConsumerConfigError);
    await expect(run).rejects.toThrow(/nats-server 2\.10/);
  });
});
