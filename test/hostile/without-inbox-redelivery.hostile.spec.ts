// applyWithoutInbox is the broken variant (and the benchmark's baseline): handleBatch with the claim skipped, so a
// redelivered event takes effect again. The real path (handleBatch without options) must still apply it once.
import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { createInboxDeps, handleBatch } from '../../src/inbox/handle-once.ts';
import type { InboxMessage } from '../../src/inbox/inbox-message.ts';
import { applyWithoutInbox } from '../../src/inbox/without-inbox.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { creditedEvent } from '../support/accounts.ts';
import { createSubscriberDb } from '../support/consumer.ts';
import { balances, readOwnerBalance } from '../support/fixture/subscribers/balances/subscriber.ts';
import { fixtureModules } from '../support/fixture/modules.ts';

function delivery(e: IntegrationEvent, deliveryCount: number): InboxMessage {
  return {
    subject: `test.account.${e.aggregateId}.0`,
    aggregate: `account.${e.aggregateId}`,
    headers: { 'Event-Type': e.type, 'Content-Type': 'application/json', 'Nats-Msg-Id': e.eventId },
    payload: JSON.stringify(e),
    deliveryCount,
    fallbackId: e.eventId,
  };
}

async function setup() {
  const sdb = await createSubscriberDb({ subscriber: 'balances' });
  const inbox = createInboxDeps(balances, { writer: sdb.writer, registry: registryOf(fixtureModules), metrics: createMetrics() });
  return { sdb, inbox };
}

describe('applying without the inbox, against the inbox path', () => {
  it('without the inbox, an event delivered again in a later batch takes effect twice and counts as processed both times', async () => {
    const { sdb, inbox } = await setup();
    using _ = sdb;
    const e = creditedEvent({ owner: 'twice', amountCents: 5 });
    const apply = applyWithoutInbox(inbox);
    const first = await apply([delivery(e, 1)]);
    const second = await apply([delivery(e, 2)]);
    expect([first[0]?.outcome, second[0]?.outcome]).toEqual(['processed', 'processed']);
    expect((await readOwnerBalance(sdb.db, 'twice')).creditedCents).toBe(10);
  });

  it('the inbox path applies an event delivered again in a later batch once, the copy coming back duplicate', async () => {
    const { sdb, inbox } = await setup();
    using _ = sdb;
    const e = creditedEvent({ owner: 'once', amountCents: 5 });
    const first = await handleBatch(inbox, [delivery(e, 1)]);
    const second = await handleBatch(inbox, [delivery(e, 2)]);
    expect([first[0]?.outcome, second[0]?.outcome]).toEqual(['processed', 'duplicate']);
    expect((await readOwnerBalance(sdb.db, 'once')).creditedCents).toBe(5);
  });

  it('the inbox path applies an event once after its effect was applied without the inbox, and the copies within one batch once', async () => {
    const { sdb, inbox } = await setup();
    using _ = sdb;
    const e = creditedEvent({ owner: 'mixed', amountCents: 5 });
    // without the inbox nothing was claimed: the inbox path takes it as new once, then as duplicate
    await applyWithoutInbox(inbox)([delivery(e, 1)]);
    const results = await handleBatch(inbox, [delivery(e, 2), delivery(e, 3)]);
    expect(results.map((r) => r.outcome)).toEqual(['processed', 'duplicate']);
    expect(await handleBatch(inbox, [delivery(e, 4)]).then((r) => r[0]?.outcome)).toBe('duplicate');
    expect((await readOwnerBalance(sdb.db, 'mixed')).creditedCents).toBe(10);
  });

  it('without the inbox, every copy of an event counts as new: two copies in one batch both take effect', async () => {
    const { sdb, inbox } = await setup();
    using _ = sdb;
    const e = creditedEvent({ owner: 'same-batch', amountCents: 5 });
    const results = await applyWithoutInbox(inbox)([delivery(e, 1), delivery(e, 2)]);
    expect({ outcomes: results.map((r) => r.outcome), credited: (await readOwnerBalance(sdb.db, 'same-batch')).creditedCents }).toEqual({
      outcomes: ['processed', 'processed'],
      credited: 10,
    });
  });
});
