// Per-aggregate order across subjects of one aggregate (partition tokens change with the count, older releases had
// none), and sitting out while the broker is unreachable.
import type { JsMsg } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { createHeldMessages } from '../../src/inbox/held-messages.ts';
import { aggregateKeyOf } from '../../src/inbox/inbox-message.ts';
import { createSitOut } from '../../src/inbox/sit-out.ts';
import { silentLogger } from '../../src/logger.ts';

/** A delivery as the runner sees it, enough for the held messages. */
function delivery(subject: string, seq: number, headers?: Record<string, string>): JsMsg {
  return {
    subject,
    headers: headers ? new Map(Object.entries(headers).map(([k, v]) => [k, [v]])) : undefined,
    data: new TextEncoder().encode('{}'),
    info: { streamSequence: seq, deliveryCount: 1, stream: 'S' },
    working: () => undefined,
  } as unknown as JsMsg;
}

describe('aggregateKeyOf', () => {
  it('takes the aggregate headers first', () => {
    expect(aggregateKeyOf('x.y.z', { 'Aggregate-Type': 'account', 'Aggregate-Id': 'a1' }, 'events')).toBe('account.a1');
  });

  it('strips a dotted prefix and keeps type and id, with or without a partition token', () => {
    expect(aggregateKeyOf('my.events.account.a1.3', {}, 'my.events')).toBe('account.a1');
    expect(aggregateKeyOf('my.events.account.a1.12', {}, 'my.events')).toBe('account.a1');
    expect(aggregateKeyOf('my.events.account.a1', {}, 'my.events')).toBe('account.a1');
  });

  it('falls back to the subject when the prefix does not match', () => {
    expect(aggregateKeyOf('other.account.a1.3', {}, 'my.events')).toBe('other.account.a1.3');
  });
});

describe('held messages', () => {
  it('keeps one aggregate behind its failing message whatever subjects its messages came on', () => {
    const held = createHeldMessages('my.events');
    const first = held.add(delivery('my.events.account.a1', 1), 0); // before partitions existed
    held.add(delivery('my.events.account.a1.3', 2), 0); // count 4
    held.add(delivery('my.events.account.a1.11', 3), 0); // count 16
    held.add(delivery('my.events.account.b2.5', 4), 0);
    expect(held.take(10, 0).map((h) => h.seq)).toEqual([1, 2, 3, 4]);
    held.settle();
    first.retryAt = 1000; // its handler failed: retried later, the rest of a1 waits
    expect(held.take(10, 0).map((h) => h.seq)).toEqual([4]);
    held.settle();
    expect(held.take(10, 1000).map((h) => h.seq)).toEqual([1, 2, 3, 4]);
  });

  it('takes the messages of an aggregate only up to the first one held back, and counts only those as ready', () => {
    const held = createHeldMessages('my.events');
    for (const [subject, seq] of [
      ['my.events.account.a1.0', 2],
      ['my.events.account.a1.0', 5],
      ['my.events.account.a1.0', 7],
      ['my.events.account.b2.1', 6],
    ] as const)
      held.add(delivery(subject, seq), 0);
    // an earlier message of a1, sequence 4, is awaited: 5 and 7 wait, 2 (before it) and b2 go
    const blocked = (h: { aggregate: string; seq: number }) => h.aggregate === 'account.a1' && h.seq > 4;
    expect(held.ready(0, blocked)).toBe(2);
    expect(held.take(10, 0, blocked).map((h) => h.seq)).toEqual([2, 6]);
    held.settle();
    expect(held.ready(0)).toBe(4);
  });
});

describe('sitting out', () => {
  it('gives up after a TTL of trouble and rejoins only after a probe succeeded', async () => {
    let now = 0;
    let troubled = true;
    let reachable = false;
    const sit = createSitOut({
      ttlMs: 1000,
      troubled: () => troubled,
      probe: async () => {
        if (!reachable) throw new Error('unreachable');
      },
      log: silentLogger,
      fields: {},
      now: () => now,
    });
    expect(sit.eligible()).toBe(true);
    now = 999;
    expect(sit.eligible()).toBe(true);
    now = 1000;
    expect(sit.eligible()).toBe(false);
    troubled = false; // holding nothing now: no trouble, but still out until a probe reaches the broker
    expect(sit.eligible()).toBe(false);
    await new Promise((r) => setTimeout(r, 0));
    expect(sit.sittingOut()).toBe(true);
    reachable = true;
    expect(sit.eligible()).toBe(false);
    await new Promise((r) => setTimeout(r, 0));
    expect(sit.eligible()).toBe(true);
  });

  it('never sits out while the trouble clears within a TTL', () => {
    let now = 0;
    let troubled = true;
    const sit = createSitOut({ ttlMs: 1000, troubled: () => troubled, probe: async () => undefined, log: silentLogger, fields: {}, now: () => now });
    expect(sit.eligible()).toBe(true);
    now = 900;
    troubled = false;
    expect(sit.eligible()).toBe(true);
    troubled = true;
    now = 1500;
    expect(sit.eligible()).toBe(true);
    now = 2400;
    expect(sit.eligible()).toBe(true);
  });
});
