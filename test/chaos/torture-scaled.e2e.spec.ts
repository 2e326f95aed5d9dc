import { describe, expect, it } from 'vitest';
import { logShownOnFailure } from '../support/torture-log.ts';
import { DELIVERY_BUDGET_MS, formatReport, runTorture, violationCount } from '../../torture/run.ts';

// The torture run scaled out: two relays sharing the outbox partitions through leases, two instances of each
// subscriber (CONSUMER_PARTITIONED=true: one durable per partition, leased), and a three-node JetStream cluster with
// the stream at three replicas, whose broker restarts SIGKILL one node (the stream's leader) at a time.
describe('torture - scaled out: relays, subscriber instances and a JetStream cluster', () => {
  it('a seeded run that kills each relay and each subscriber instance, pauses a relay past its lease TTL, restarts the stream leader node twice, and takes the whole cluster down for a backlog, loses, duplicates and reorders nothing', async () => {
    const result = await runTorture({
      seed: 3,
      commands: 400,
      kills: 8,
      brokerRestarts: 2,
      pauses: 1,
      rate: 40,
      concurrency: 8,
      backlog: 1500,
      lockSubscriberMs: DELIVERY_BUDGET_MS + 3000,
      relays: 2,
      subscriberInstances: 2,
      cluster: true,
      leaseTtlMs: 2000,
      log: logShownOnFailure(),
    });
    const report = formatReport(result);
    console.log(report);
    // seed 3's schedule hits every process: each relay, each instance of each subscriber, and the API
    const killed = new Set(result.schedule.flatMap((f) => (f.kind === 'kill' ? [`${f.target}-${f.instance}`] : [])));
    expect([...killed].sort()).toEqual(['api-0', 'audit-0', 'audit-1', 'balances-0', 'balances-1', 'relay-0', 'relay-1']);
    expect(result.schedule.find((f) => f.kind === 'pause')).toMatchObject({ target: 'relay' });
    expect(result.injected.pause).toBe(1);
    expect(result.injected['broker restart']).toBe(2);
    expect(result.injected['broker restart of the stream leader']).toBeGreaterThanOrEqual(1);
    expect(result.topology).toMatchObject({ relays: 2, subscriberInstances: 2, partitioned: true, cluster: true });
    // killed and paused relays' partitions were taken over by the other relay or a restarted one within the run
    expect(result.leases.relay?.takeovers, report).toBeGreaterThan(0);
    expect(result.leases.balances?.takeovers, report).toBeGreaterThan(0);
    expect(result.leases.audit?.takeovers, report).toBeGreaterThan(0);
    expect(result.counts.acknowledged).toBeGreaterThan(1500);
    expect(violationCount(result), report).toBe(0);
  }, 170_000);

  // The broken variants scale out what they break (and no more, to keep the file short): the relays, or the subscribers.
  it('the checker reports lost events for two relays that mark rows sent before publishing them, on the cluster', async () => {
    const result = await runTorture({
      seed: 13,
      commands: 150,
      kills: 0,
      brokerRestarts: 0,
      pauses: 0,
      rate: 60,
      concurrency: 4,
      broken: 'mark-before-puback',
      relays: 2,
      cluster: true,
      log: logShownOnFailure(),
    });
    expect(result.counts.lost, formatReport(result)).toBeGreaterThan(0);
  }, 120_000);

  it('the checker reports duplicated effects for two instances of each subscriber (four partitions) running without the inbox, on the cluster', async () => {
    const result = await runTorture({
      seed: 11,
      commands: 150,
      kills: 0,
      brokerRestarts: 0,
      pauses: 0,
      rate: 60,
      concurrency: 4,
      broken: 'no-inbox',
      subscriberInstances: 2,
      partitions: 4,
      cluster: true,
      log: logShownOnFailure(),
    });
    expect(result.counts.duplicatedEffects, formatReport(result)).toBeGreaterThan(0);
  }, 120_000);
});
