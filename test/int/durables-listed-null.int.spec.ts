// nats-server before 2.10 answers a consumer list with null in place of a consumer deleted while it answers (a
// runner's short-lived ephemeral consumer, an old durable another instance removes). Readying the durables reads that
// list; a null in it must not fail the subscriber's start. The broker is real; only its list gets the null it can
// send, at the front, where the race puts it.
import { jetstreamManager, type ConsumerInfo, type JetStreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { prepareDurables, type DurablePlan } from '../../src/inbox/partition-durables.ts';
import { silentLogger } from '../../src/logger.ts';
import { durablesOf, freshStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** `jsm` whose consumer lists start with the null nats-server 2.9 lists for a consumer deleted meanwhile. */
function listingDeletedConsumer(jsm: JetStreamManager): JetStreamManager {
  const consumers = new Proxy(jsm.consumers, {
    get(target, prop) {
      if (prop === 'list')
        return (stream: string) =>
          (async function* () {
            yield null as unknown as ConsumerInfo;
            for await (const c of target.list(stream)) yield c;
          })();
      const value: unknown = Reflect.get(target, prop);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return new Proxy(jsm, {
    get(target, prop) {
      if (prop === 'consumers') return consumers;
      const value: unknown = Reflect.get(target, prop);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

describe('subscribers - readying the partition durables', () => {
  it('creates every partition durable when the broker lists a consumer deleted meanwhile as null', async () => {
    const stream = await freshStream(nats().nc, 'NULLLIST');
    const base = 'svc-nulllist';
    const plan: DurablePlan = {
      stream,
      subscriber: 'nulllist',
      base,
      mode: { partitioned: true, partitions: 4 },
      aggregateTypes: ['account'],
      settings: (name, filterSubjects) => ({ stream: stream.name, name, filterSubjects, ackWaitMs: 30_000, maxDeliver: -1, maxAckPending: 1000 }),
      retentionMs: 7 * 86_400_000,
      log: silentLogger,
    };
    const jsm = listingDeletedConsumer(await jetstreamManager(nats().nc));
    // twice: creating the durables, then finding them there
    expect(await prepareDurables(jsm, plan, () => true)).toBe(true);
    expect(await prepareDurables(jsm, plan, () => true)).toBe(true);
    expect((await durablesOf(nats().nc, stream.name)).map((c) => c.name).sort()).toEqual([0, 1, 2, 3].map((k) => `${base}-p${k}`));
  });
});
