import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.ts';
import type { Logger } from '../../src/logger.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import { ensureStream, UnsafeStreamConfigError } from '../../src/nats/ensure-stream.ts';
import { streamSettingsFrom, type StreamSettings } from '../../src/nats/stream-settings.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { accountCommands, expectResponse } from '../support/accounts.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { countRows, createTestDb, type TestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { audit } from '../support/fixture/subscribers/audit/subscriber.ts';
import { useNatsCluster } from '../support/use-nats-cluster.ts';
import { startNats } from '../support/nats.ts';
import { relayDeps } from '../support/relay.ts';
import { ownStream } from '../support/stream.ts';

// A three-node JetStream cluster of local nats-server processes, the stream replicated three times. The relay and the
// subscriber run in process, connected to all three nodes (NATS_URL with three servers).

const nats = useNatsCluster();

/** What a process connects with: every node of the cluster, the service's reconnect settings. */
const clusterConnect = (name: string) => () => connect(natsConnectionOptions({ servers: nats().urls.split(','), name }));

/** A logger that keeps its lines, to see what the workers went through. */
type LogLine = { level: string; msg: string; fields?: Record<string, unknown> };
function recordingLogger(): Logger & { lines: LogLine[] } {
  const lines: LogLine[] = [];
  const at = (level: string) => (msg: string, fields?: Record<string, unknown>) => void lines.push({ level, msg, ...(fields ? { fields } : {}) });
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Outbox rows in seq order. */
async function outboxRows(t: TestDb) {
  const res = await t.client.execute('SELECT seq, id, aggregate_id, status, attempts, last_error FROM outbox ORDER BY seq');
  return res.rows.map((r) => ({
    seq: Number(r.seq),
    id: String(r.id),
    aggregateId: String(r.aggregate_id),
    status: String(r.status),
    attempts: Number(r.attempts),
    lastError: r.last_error === null ? null : String(r.last_error),
  }));
}

/** The Nats-Msg-Id of every message in the stream, read with an ordered consumer (in stream order). */
async function streamMsgIds(stream: StreamSettings): Promise<string[]> {
  const info = await (await jetstreamManager(nats().nc)).streams.info(stream.name);
  const ids: string[] = [];
  if (info.state.messages === 0) return ids;
  const consumer = await jetstream(nats().nc).consumers.get(stream.name);
  const messages = await consumer.consume();
  for await (const m of messages) {
    ids.push(m.headers?.get('Nats-Msg-Id') ?? '');
    if (m.seq >= info.state.last_seq) break;
  }
  await messages.close();
  return ids;
}

/**
 * Events that `seen` (ids in the order they were stored or applied) holds after a later event of their aggregate,
 * by the outbox's commit order (`rows` in seq order).
 */
function outOfAggregateOrder(rows: Array<{ seq: number; id: string; aggregateId: string }>, seen: string[]): Array<{ seq: number; id: string }> {
  const at = new Map(seen.map((id, i) => [id, i]));
  const byAggregate = new Map<string, Array<{ seq: number; id: string; aggregateId: string }>>();
  for (const r of rows) byAggregate.set(r.aggregateId, [...(byAggregate.get(r.aggregateId) ?? []), r]);
  const out: Array<{ seq: number; id: string }> = [];
  for (const events of byAggregate.values()) {
    // walking back from the newest event: one seen after the earliest-seen of the events committed after it is late
    let earliestLater = Number.POSITIVE_INFINITY;
    for (let i = events.length - 1; i >= 0; i--) {
      const p = at.get(events[i]!.id) ?? -1;
      if (p > earliestLater) out.push({ seq: events[i]!.seq, id: events[i]!.id });
      if (p >= 0) earliestLater = Math.min(earliestLater, p);
    }
  }
  return out;
}

/** Milliseconds since `start` (performance.now()). */
const since = (start: number) => Math.round(performance.now() - start);

/** A worker's log lines above debug, with their fields, oldest first: what a failure message shows. */
const story = (lines: LogLine[]) =>
  lines
    .filter((l) => l.level !== 'debug')
    .slice(-40)
    .map((l) => `[${l.level}] ${l.msg} ${JSON.stringify(l.fields ?? {})}`)
    .join(' / ');

describe('JetStream cluster - a replicated stream', () => {
  it('creates the stream with STREAM_REPLICAS=3 replicas, one on each node', async () => {
    const settings = streamSettingsFrom(parseConfig({ STREAM_REPLICAS: '3', NATS_STREAM: `REPL_${process.pid}`, EVENTS_SUBJECT_PREFIX: `repl${process.pid}` }));
    expect(settings.replicas).toBe(3);
    const info = await ensureStream(await jetstreamManager(nats().nc), settings);
    expect(info.config.num_replicas).toBe(3);
    await nats().streamCaughtUp(settings.name);
    const cl = (await (await jetstreamManager(nats().nc)).streams.info(settings.name)).cluster!;
    expect([cl.leader, ...(cl.replicas ?? []).map((r) => r.name)].sort()).toEqual(
      nats()
        .nodes.map((n) => n.name)
        .sort(),
    );
  });

  it('keeps an existing stream with another replica count as it is, and warns', async () => {
    const stream = ownStream('KEEP', { replicas: 1 });
    await ensureStream(await jetstreamManager(nats().nc), stream);
    const log = recordingLogger();
    const info = await ensureStream(await jetstreamManager(nats().nc), { ...stream, replicas: 3 }, log);
    expect(info.config.num_replicas).toBe(1);
    expect(log.lines).toEqual([
      expect.objectContaining({ level: 'warn', fields: { stream: stream.name, replicas: 1, configured: 3 }, msg: expect.stringMatching(/replica/) }),
    ]);
    // no warning when they agree
    const quiet = recordingLogger();
    await ensureStream(await jetstreamManager(nats().nc), stream, quiet);
    expect(quiet.lines).toEqual([]);
  });

  // The timeouts only guard against a hang: two elections took 10–18 s each on a loaded two-core machine, publishing
  // resumed 20 s after a kill beside other test files, and the run reached its last checks after ≈ 90 s in the
  // template tier, where a copy of the suite runs beside other tests.
  it('publishes every event once and applies it once, in per-aggregate order, while the stream leader and then another node are SIGKILLed and restarted under load', {
    timeout: 300_000,
  }, async () => {
    const c = nats();
    await using t = await createTestDb();
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const stream = ownStream('CLUSTER', { replicas: 3 });
    const relayLog = recordingLogger();
    const relay = createRelay(
      relayDeps(t, c.urls, {
        stream,
        connect: clusterConnect('test relay'),
        log: relayLog,
        settings: { backoffBaseMs: 20, maxBackoffMs: 200, publishTimeoutMs: 1000 },
      }),
    );
    const runnerLog = recordingLogger();
    const runner = testRunner(sdb, c.urls, audit, stream, { connect: clusterConnect('test audit'), log: runnerLog, ackWaitMs: 5000 });
    const stop = new AbortController();
    const relaying = relay.run({ signal: stop.signal });
    const consuming = runner.run({ signal: stop.signal });

    // Load: commands through the fixture's command path, every account credited in each round, until told to stop.
    const accounts = accountCommands(t.deps);
    const ids = await accounts.openMany(30);
    let loading = true;
    let rounds = 0;
    const load = (async () => {
      while (loading) {
        await Promise.all(ids.map(async (id) => expectResponse(await accounts.deposit(id, 1))));
        rounds++;
        await sleep(40);
      }
    })();
    // on any way out, the load, the relay and the runner stop before the databases close
    await using _workers = {
      async [Symbol.asyncDispose]() {
        loading = false;
        stop.abort();
        await Promise.allSettled([load, relaying, consuming]);
      },
    };

    const maxSeq = async () => Number((await t.client.execute('SELECT max(seq) FROM outbox')).rows[0]![0] ?? 0);
    const sentAbove = async (seq: number) => (await countRows(t.client, 'outbox', "seq > ? AND status = 'sent'", [seq])) > 0;
    const appliedAbove = async (seq: number) => {
      const later = (await t.client.execute({ sql: 'SELECT id FROM outbox WHERE seq > ? ORDER BY seq LIMIT 50', args: [seq] })).rows.map((r) => String(r.id));
      if (later.length === 0) return false;
      return (await countRows(sdb.client, 'audit_log', `event_id IN (${later.map(() => '?').join(',')})`, later)) > 0;
    };

    /** Kills `victim`, and measures how long until a new stream leader, a publish and an applied event after the kill. */
    const killAndMeasure = async (victim: number) => {
      const seq = await maxSeq();
      const start = performance.now();
      await c.kill(victim);
      const leader = await c.streamLeader(stream.name, 30_000);
      const electionMs = since(start);
      await eventually(() => sentAbove(seq), { timeoutMs: 60_000, everyMs: 20, what: 'an event committed after the kill to be published' });
      const publishResumedMs = since(start);
      await eventually(() => appliedAbove(seq), { timeoutMs: 60_000, everyMs: 20, what: 'an event committed after the kill to be applied' }).catch(
        (error: unknown) => {
          throw new Error(`${String(error)}; the subscriber's log: ${story(runnerLog.lines)}`);
        },
      );
      return { victim, newLeader: leader, electionMs, publishResumedMs, appliedResumedMs: since(start) };
    };

    await eventually(async () => (await countRows(sdb.client, 'audit_log')) > 100, { what: 'events flowing before the first kill' });
    await c.streamCaughtUp(stream.name);
    const first = await c.streamLeader(stream.name);
    const firstKill = await killAndMeasure(first);
    expect(firstKill.newLeader).not.toBe(first);
    await c.restart(first);
    await c.streamCaughtUp(stream.name);

    // later, another node: the leader elected after the first kill (unless the restarted node took the lead back)
    const leader = await c.streamLeader(stream.name);
    const second = leader !== first ? leader : (first + 1) % c.nodes.length;
    const secondKill = await killAndMeasure(second);
    await c.restart(second);
    await sleep(500);
    loading = false;
    await load;

    const committed = await maxSeq();
    await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === committed, {
      timeoutMs: 60_000,
      what: 'the relay to drain the outbox',
    });
    await eventually(async () => (await countRows(sdb.client, 'audit_log')) >= committed, { timeoutMs: 60_000, what: 'the subscriber to catch up' });
    stop.abort();
    const [relayed, consumed] = await Promise.all([relaying, consuming]);

    const rows = await outboxRows(t);
    await c.streamCaughtUp(stream.name);
    const info = await (await jetstreamManager(c.nc)).streams.info(stream.name);
    const msgIds = await streamMsgIds(stream);
    const applied = (await sdb.client.execute('SELECT event_id, account_id FROM audit_log ORDER BY n')).rows.map((r) => String(r.event_id));
    const streamDisorder = outOfAggregateOrder(rows, msgIds);
    const effectDisorder = outOfAggregateOrder(rows, applied);
    const errorsOf = (lines: LogLine[]) => [
      ...new Set(lines.filter((l) => l.level === 'warn' && l.fields?.error !== undefined).map((l) => String(l.fields?.error))),
    ];
    console.log(
      `cluster: ${rows.length} events (${relayed.duplicates} re-publishes answered as duplicates, ${relayed.brokerErrors} passes ended by the broker); ` +
        `kill 1 (leader n${firstKill.victim}): new leader n${firstKill.newLeader} after ${firstKill.electionMs} ms, publishing again after ${firstKill.publishResumedMs} ms, applying after ${firstKill.appliedResumedMs} ms; ` +
        `kill 2 (leader n${secondKill.victim}): new leader n${secondKill.newLeader} after ${secondKill.electionMs} ms, publishing again after ${secondKill.publishResumedMs} ms, applying after ${secondKill.appliedResumedMs} ms; ` +
        `relay saw: ${errorsOf(relayLog.lines).join(' | ')}; subscriber saw: ${errorsOf(runnerLog.lines).join(' | ') || 'nothing'}, ` +
        `${consumed.duplicates} redeliveries dropped as duplicates; out of aggregate order: ${streamDisorder.length} in the stream, ${effectDisorder.length} in the effects`,
    );

    // the outbox: everything sent, nothing failed, parked or charged an attempt
    expect(rows.length).toBe(committed);
    expect(rows.length).toBe(ids.length * (rounds + 1));
    expect(rows.filter((r) => r.status !== 'sent' || r.attempts !== 0 || r.lastError !== null)).toEqual([]);
    expect(relayed).toMatchObject({ failed: 0, parked: 0 });
    // a publish that timed out but was stored is acknowledged as a duplicate when the same Nats-Msg-Id is published again
    expect(relayed.published + relayed.duplicates).toBe(rows.length);
    // the elections were felt: passes ended with the broker unavailable and were retried
    expect(relayed.brokerErrors).toBeGreaterThan(0);

    // the stream: each event exactly once, each aggregate's events in commit order
    expect(info.config.num_replicas).toBe(3);
    expect(info.state.messages).toBe(rows.length);
    expect(msgIds.length).toBe(rows.length);
    expect(new Set(msgIds)).toEqual(new Set(rows.map((r) => r.id)));
    expect(streamDisorder, 'events stored after a later event of their aggregate').toEqual([]);

    // the subscriber: each event took effect once, in the order of its aggregate
    expect(applied.length).toBe(rows.length);
    expect(new Set(applied)).toEqual(new Set(rows.map((r) => r.id)));
    expect(await countRows(sdb.client, 'inbox')).toBe(rows.length);
    expect(consumed).toMatchObject({ processed: rows.length, deadLettered: 0 });
    // Deliveries lost with a killed node come back only after ack_wait: the runner holds the later events of their
    // aggregates until then (createMissingDeliveries).
    expect(effectDisorder, `events applied after a later event of their aggregate; the subscriber's log: ${story(runnerLog.lines)}`).toEqual([]);
  });

  it('refuses to start a relay with STREAM_REPLICAS=3 on a server that is not clustered', async () => {
    await using single = await startNats();
    await using t = await createTestDb();
    const stream = ownStream('SOLO', { replicas: 3 });
    const relay = createRelay(relayDeps(t, single.url, { stream }));
    await expect(relay.run({ timeLimitMs: 10_000 })).rejects.toThrow(UnsafeStreamConfigError);
    await expect(relay.run({ timeLimitMs: 10_000 })).rejects.toThrow(/STREAM_REPLICAS is 3 but the NATS server is not clustered/);
  });
});
