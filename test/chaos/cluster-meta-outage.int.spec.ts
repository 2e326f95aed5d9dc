import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { useNatsCluster } from '../support/use-nats-cluster.ts';
import { appliedEvents, eventIds, logLines, recorder, recordingDb } from '../support/recording-subscriber.ts';
import { createStream, ownStream, publishEvents } from '../support/stream.ts';

// A delivery goes missing while the cluster has no meta leader (two of three nodes killed). The stream has one
// replica, on the node left running, so its durable keeps delivering newer messages; but the check for the missing
// delivery reads the stream through an ephemeral consumer, and creating one needs the meta leader. A check that gave
// up after one wait, or after a fixed number of waits, let a later event of the aggregate overtake the missing one; it
// must wait for the broker however long the cluster has no meta leader.

const nats = useNatsCluster();

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('JetStream cluster - no meta leader while a delivery is missing', () => {
  it('holds the later event of the aggregate until the broker can answer the check again, then applies the missing event first', {
    timeout: 120_000,
  }, async () => {
    const c = nats();
    const stream = ownStream('META', { replicas: 1 });
    await createStream(c.nc, stream);
    const home = await c.streamLeader(stream.name);
    const others = c.nodes.map((_, i) => i).filter((i) => i !== home);
    const url = c.nodes[home]!.url;
    const admin = await connect({ servers: [url] });
    const thief = await connect({ servers: [url] });
    let keepAlive: ReturnType<typeof setInterval> | undefined;
    await using _connections = {
      async [Symbol.asyncDispose]() {
        clearInterval(keepAlive);
        await thief.close();
        await admin.close();
      },
    };
    await using sdb = await recordingDb();
    const jsm = await jetstreamManager(admin);
    const info = () => jsm.consumers.info(stream.name, 'meta');
    const a = `meta-a-${process.pid}`;
    const b = `meta-b-${process.pid}`;
    const [a1, a2, a3] = [openedEvent({ accountId: a }), creditedEvent({ accountId: a, version: 2 }), creditedEvent({ accountId: a, version: 3 })];
    const [b1, b2] = [openedEvent({ accountId: b }), creditedEvent({ accountId: b, version: 2 })];
    const { log, lines } = logLines();

    // ack_wait 3 s: one wait of a check is 1.5 × 3000 + 1000 = 5500 ms of pulling
    let pulling = true;
    const stop = new AbortController();
    const running = testRunner(sdb, url, recorder('meta'), stream, {
      ackWaitMs: 3000,
      pullExpiresMs: 1000,
      log,
      connect: () => connect({ servers: [url], name: 'test meta' }),
    }).run({ signal: stop.signal, timeLimitMs: 100_000, lease: { mayPull: () => pulling, holds: () => true } });
    await using _runner = {
      async [Symbol.asyncDispose]() {
        stop.abort();
        await running.catch(() => undefined);
      },
    };
    await publishEvents(admin, stream, [a1!, b1!]);
    await eventually(async () => (await appliedEvents(sdb)).length === 2, { what: 'a1 and b1 applied' });

    // a2's delivery goes to another puller, which keeps it alive and never answers: to the runner it went missing
    pulling = false;
    await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the runner left' });
    await publishEvents(admin, stream, [a2!]);
    const stolen = await (await jetstream(thief).consumers.get(stream.name, 'meta')).next({ expires: 2000 });
    expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(a2!.eventId);
    keepAlive = setInterval(() => stolen!.working(), 500);
    await publishEvents(admin, stream, [a3!, b2!]);

    // no meta leader: the durable on the node left still delivers a3 and b2, the check cannot create its reader
    await Promise.all(others.map((i) => c.kill(i)));
    pulling = true;
    // well over four waits of pulling time (5.5 s each; pulling time runs slower than the clock, between pulls): a check
    // that gave up after its first wait, or after four (measured: the earlier bound fails here), has applied a3 and b2
    // by now; one that holds on until the broker can answer has applied neither
    await sleep(40_000);
    expect(await appliedEvents(sdb), `nothing after the gap applied while the check cannot run; the log: ${lines.join(' / ')}`).toEqual(eventIds([a1!, b1!]));
    expect(lines.filter((l) => l.includes('still cannot check')).length).toBeGreaterThan(0);

    // the meta leader back: the check finds a2 missing, b2 goes on, a3 waits for a2's redelivery
    await Promise.all(others.map((i) => c.restart(i)));
    await eventually(async () => (await appliedEvents(sdb)).includes(b2!.eventId), { timeoutMs: 30_000, what: 'b2 applied once the check ran' });
    expect(await appliedEvents(sdb)).not.toContain(a3!.eventId);
    clearInterval(keepAlive);
    await eventually(async () => (await appliedEvents(sdb)).length === 5, { timeoutMs: 30_000, what: 'a2 delivered again, then a3' });

    const order = await appliedEvents(sdb);
    expect(order.filter((id) => eventIds([a1!, a2!, a3!]).includes(id))).toEqual(eventIds([a1!, a2!, a3!]));
    expect(order.filter((id) => eventIds([b1!, b2!]).includes(id))).toEqual(eventIds([b1!, b2!]));
    expect(lines.filter((l) => l.includes('stopped waiting'))).toEqual([]);
  });
});
