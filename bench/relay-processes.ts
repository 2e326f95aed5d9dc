// `npm run bench:relay -- --relays 1,2,4`: the drain rate of 1, 2, 4 … relay PROCESSES (the real entry,
// `node --import tsx src/entry/relay.ts`, as `npm run relay` starts it) sharing one outbox of --rows rows through
// their partition leases, each as a ratio to one relay and to raw pipelined JetStream publishing of the same
// messages (same bodies, headers, subjects and Nats-Msg-Ids, 256 in flight, one connection) measured in this run.
//
// For each count the relays start on an empty, migrated outbox and are left to settle (every relay holding its fair
// share of the partitions, connected to the broker); then the backlog appears at once (one INSERT … SELECT from a
// database built beforehand) and the drain is timed from the first message stored to the last, by the server's own
// timestamps (stream first_ts / last_ts). What a process costs before it publishes is reported apart: spawn → settled,
// backlog committed → first publish, and a cold start (one relay spawned on the backlog: spawn → first publish).
// CPU use of each relay and of nats-server during the drain comes from /proc (Linux); on a machine with fewer cores
// than relays + 1 the relays compete with the broker for CPU, which is what the CPU column shows.
import { createClient, type Client } from '@libsql/client';
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { DB_NOW_MS_SQL } from '../src/leases/lease-store.ts';
import { ensureStream } from '../src/nats/ensure-stream.ts';
import { eventSubject } from '../src/nats/stream-settings.ts';
import { createInFlight } from '../src/outbox/in-flight.ts';
import { eventHeaders } from '../src/outbox/event-headers.ts';
import type { IntegrationEvent } from '../src/events/integration-event.ts';
import { freePort, runtimeCommand } from '../test/support/process.ts';
import { TEST_STREAM } from '../test/support/stream.ts';
import { startChild, type Child } from './variants/launch.ts';
import { cpuSecondsOf, createServiceDb, findPid, machineCpuTicks, round, runQueueWaitSecondsOf, saveResult, startNats } from './support.ts';

export type RelayProcessesOptions = {
  /** Relay process counts to compare, e.g. [1, 2, 4]; the first is the baseline of the "× 1 relay" column when it is 1. */
  counts: number[];
  rows: number;
  /** RELAY_LEASE_TTL_MS of the relays: renewals every third of it, so settling takes a few thirds. */
  leaseTtlMs: number;
  /** Each count is run this many times; the median drain is reported. */
  rounds: number;
  /** Starts the relays of the first count and the first cold start with `node --cpu-prof` (profiles in temp dirs, paths printed). */
  profile: boolean;
  /** Fills the outbox with `n` rows through the service's command path (the caller's, so this file needs no context). */
  fill: (t: Awaited<ReturnType<typeof createServiceDb>>, n: number) => Promise<void>;
};

const IN_FLIGHT = 256;
const RELAY_ENTRY = 'src/entry/relay.ts';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Row = { id: string; aggregate_type: string; aggregate_id: string; partition: number; payload: string; headers: string };

/** The backlog as the relay will publish it: body, headers (a traceparent of the relay's length), subject suffix, Nats-Msg-Id. */
function rawMessages(rows: Row[]) {
  const enc = new TextEncoder();
  const traceparent = `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`;
  return rows.map((r) => {
    let stored: Record<string, unknown> = {};
    try {
      stored = JSON.parse(r.headers || '{}') as Record<string, unknown>;
    } catch {
      // as the relay: unreadable stored headers only lose those headers
    }
    const event = JSON.parse(r.payload) as IntegrationEvent;
    return {
      id: r.id,
      data: enc.encode(r.payload),
      headers: eventHeaders(event, { traceparent, correlationId: stored.correlationId }),
      subject: (prefix: string) => eventSubject(prefix, r.aggregate_type, r.aggregate_id, r.partition),
    };
  });
}

/** What raw publishing reached, and the CPU it took per message: this process (the publisher) and nats-server. */
type RawRun = { perSec: number; cpuUsPerMsg: number; natsCpuUsPerMsg: number | undefined };

/**
 * Raw pipelined publish of `messages` on one connection, IN_FLIGHT at a time, to a fresh stream: messages per second,
 * and CPU per message of this process (which does nothing else meanwhile) and of nats-server (`natsPid`).
 */
async function rawPublish(
  url: string,
  jsm: JetStreamManager,
  name: string,
  messages: ReturnType<typeof rawMessages>,
  natsPid: number | undefined,
): Promise<RawRun> {
  const stream = { ...TEST_STREAM, name, prefix: name.toLowerCase(), maxBytes: 2 * 1024 ** 3 };
  await ensureStream(jsm, stream);
  const nc = await connect({ servers: [url], noAsyncTraces: true });
  const js = jetstream(nc);
  const start = performance.now();
  const cpuStart = process.cpuUsage();
  const natsStart = cpuSecondsOf(natsPid);
  const inFlight = createInFlight(IN_FLIGHT);
  for (const m of messages) {
    // as the relay does: no await while a slot is free, so one turn's publishes share a socket write
    if (inFlight.full()) await inFlight.slot();
    inFlight.track(js.publish(m.subject(stream.prefix), m.data, { msgID: m.id, headers: m.headers }));
  }
  await inFlight.drained();
  const secs = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpuStart);
  const natsEnd = cpuSecondsOf(natsPid);
  await nc.close();
  await jsm.streams.delete(name);
  return {
    perSec: messages.length / secs,
    cpuUsPerMsg: round((cpu.user + cpu.system) / messages.length, 1),
    natsCpuUsPerMsg: natsStart === undefined || natsEnd === undefined ? undefined : round(((natsEnd - natsStart) * 1e6) / messages.length, 1),
  };
}

/**
 * The backlog's insert: every column but `seq`, in seq order, so each row gets its seq as appendToOutbox's rows do and
 * stays what the service wrote (marked payload_validated, its partition kept). Rows inserted with their old seqs are
 * what a restore writes, which the outbox's triggers unmark and take out of their partition: the relay would check
 * each in full and place it first, which is not the backlog a running service leaves.
 */
/** The outbox's columns in the database at `path`. */
async function outboxColumns(path: string): Promise<string[]> {
  const c = createClient({ url: `file:${path}` });
  try {
    return (await c.execute("SELECT name FROM pragma_table_info('outbox')")).rows.map((r) => String(r[0]));
  } finally {
    c.close();
  }
}

const insertBacklogSql = (columns: readonly string[]) => {
  const list = columns
    .filter((c) => c !== 'seq')
    .map((c) => `"${c}"`)
    .join(', ');
  return `INSERT INTO outbox (${list}) SELECT ${list} FROM seed.outbox ORDER BY seq`;
};

/** Live relay leases by owner. */
async function leaseCounts(client: Client): Promise<number[]> {
  const rs = await client.execute(
    `SELECT count(*) AS n FROM leases WHERE scope = 'relay' AND owner IS NOT NULL AND expires_at > ${DB_NOW_MS_SQL} GROUP BY owner`,
  );
  return rs.rows.map((r) => Number(r.n));
}

async function relayReady(port: number): Promise<boolean> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/ready`, { signal: AbortSignal.timeout(1000) });
    return ((await res.json()) as { relay?: { broker?: string } }).relay?.broker === 'connected';
  } catch {
    return false;
  }
}

async function scrape(port: number, series: string): Promise<number | undefined> {
  try {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(2000) })).text();
    const line = text.split('\n').find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  } catch {
    return undefined;
  }
}

async function until<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined | false>, everyMs = 20): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

type RelayProc = { child: Child; pid: number; metricsPort: number };

async function spawnRelays(k: number, env: Record<string, string>, profileDir: string | undefined): Promise<RelayProc[]> {
  const { cmd, args } = runtimeCommand('node', RELAY_ENTRY);
  const out: RelayProc[] = [];
  for (let i = 0; i < k; i++) {
    const metricsPort = await freePort();
    const nodeArgs = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`, ...args] : args;
    const child = startChild(`relay-${i}`, cmd, nodeArgs, { ...env, INSTANCE_NAME: `bench-${i}`, METRICS_PORT: String(metricsPort) });
    out.push({ child, pid: child.proc.pid!, metricsPort });
  }
  return out;
}

/** Waits until the stream holds `rows` messages; its info then (first_ts / last_ts are the server's store times). */
async function drained(jsm: JetStreamManager, name: string, rows: number, relays: RelayProc[]) {
  return until(`${rows} messages in ${name}`, 300_000, async () => {
    for (const r of relays) if (r.child.proc.exitCode !== null) throw new Error(`${r.child.name} exited with ${r.child.proc.exitCode}:\n${r.child.output()}`);
    const info = await jsm.streams.info(name).catch(() => undefined);
    return info && info.state.messages >= rows ? info : undefined;
  });
}

type RoundResult = {
  relays: number;
  spawnToSettledMs: number;
  /** Spawn → the last relay's first lease claim: what starting the processes costs, before any rebalancing. */
  spawnToAllJoinedMs: number;
  insertMs: number;
  insertToFirstPublishMs: number;
  drainMs: number;
  perSec: number;
  lastPublishToAllMarkedMs: number;
  published: number[];
  duplicates: number;
  relayCpuPct: number[];
  /** Share of the drain each relay's main thread spent runnable but waiting for a CPU (held back by the machine). */
  relayRunQueueWaitPct: number[];
  /** How busy all of the machine's CPUs were during the drain, whoever used them. */
  machineBusyPct: number | undefined;
  natsCpuPct: number | undefined;
  /** CPU time per event over the drain window, all relays together and nats-server: what the work costs, however busy the machine. */
  relayCpuUsPerEvent: number;
  natsCpuUsPerEvent: number | undefined;
  exitCodes: Array<number | null>;
};

async function runRound(
  k: number,
  ctx: {
    dir: string;
    empty: string;
    seed: string;
    natsUrl: string;
    natsPid: number | undefined;
    jsm: JetStreamManager;
    rows: number;
    leaseTtlMs: number;
    columns: readonly string[];
    profileDir?: string | undefined;
  },
  tag: string,
): Promise<RoundResult> {
  const dbPath = join(ctx.dir, `relays-${tag}.db`);
  copyFileSync(ctx.empty, dbPath);
  const name = `BENCH_${tag.toUpperCase()}`;
  const env = {
    DATABASE_URL: `file:${dbPath}`,
    NATS_URL: ctx.natsUrl,
    NATS_STREAM: name,
    EVENTS_SUBJECT_PREFIX: name.toLowerCase(),
    STREAM_MAX_BYTES: String(2 * 1024 ** 3),
    LOG_LEVEL: 'warn',
    RELAY_LEASE_TTL_MS: String(ctx.leaseTtlMs),
  };
  const client = createClient({ url: `file:${dbPath}`, timeout: 5000 });
  const spawnedAt = Date.now();
  const relays = await spawnRelays(k, env, ctx.profileDir);
  try {
    const share = 16 / k;
    await until(`${k} relays settled`, 120_000, async () => {
      const counts = await leaseCounts(client);
      if (counts.length !== k || counts.reduce((s, n) => s + n, 0) !== 16 || counts.some((n) => Math.abs(n - share) >= 1)) return false;
      for (const r of relays) if (!(await relayReady(r.metricsPort))) return false;
      return true;
    });
    const settledAt = Date.now();
    // each relay's first claim (its membership's joined_at, by the database's clock: this host's)
    const joined = (await client.execute("SELECT max(joined_at) FROM lease_members WHERE scope = 'relay'")).rows[0]![0];
    const cpuBefore = relays.map((r) => cpuSecondsOf(r.pid));
    const natsBefore = cpuSecondsOf(ctx.natsPid);
    const waitBefore = relays.map((r) => runQueueWaitSecondsOf(r.pid));
    const machineBefore = machineCpuTicks();
    const cpuFrom = performance.now();

    const insertStart = Date.now();
    await client.execute({ sql: 'ATTACH ? AS seed', args: [ctx.seed] });
    await client.execute(insertBacklogSql(ctx.columns));
    const insertedAt = Date.now();
    await client.execute('DETACH seed');

    const info = await drained(ctx.jsm, name, ctx.rows, relays);
    const cpuAfter = relays.map((r) => cpuSecondsOf(r.pid));
    const natsAfter = cpuSecondsOf(ctx.natsPid);
    const waitAfter = relays.map((r) => runQueueWaitSecondsOf(r.pid));
    const machineAfter = machineCpuTicks();
    const cpuWindowS = (performance.now() - cpuFrom) / 1000;
    const firstTs = Date.parse(info.state.first_ts);
    const lastTs = Date.parse(info.state.last_ts);
    const drainMs = Math.max(1, lastTs - firstTs);
    await until(
      'every row marked sent',
      60_000,
      async () => Number((await client.execute("SELECT count(*) FROM outbox WHERE status = 'sent'")).rows[0]![0]) === ctx.rows,
    );
    const allMarkedAt = Date.now();
    // checked once drained, so that reading every row does not compete with the drain (at 8 KiB it reads 250 MB)
    const checked = await client.execute("SELECT count(*) FROM outbox WHERE status = 'sent' AND payload_validated = 1 AND aggregate_hash IS NOT NULL");
    if (Number(checked.rows[0]![0]) !== ctx.rows)
      throw new Error("the backlog's insert left rows unmarked or without a partition: the relay checked them in full");
    const published: number[] = [];
    let duplicates = 0;
    for (const r of relays) {
      published.push((await scrape(r.metricsPort, 'outbox_published_total')) ?? NaN);
      duplicates += (await scrape(r.metricsPort, 'outbox_duplicates_total')) ?? NaN;
    }
    // CPU from just before the backlog's insert to the last message seen, as % of one core (the insert and the
    // commit → first publish gap are in the window: the busier the drain, the smaller their share)
    const pct = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? NaN : Math.round((100 * (b - a)) / cpuWindowS));
    const exitCodes: Array<number | null> = [];
    for (const r of relays) {
      await r.child.stop(15_000);
      exitCodes.push(r.child.proc.exitCode);
    }
    await ctx.jsm.streams.delete(name).catch(() => undefined);
    return {
      relays: k,
      spawnToSettledMs: settledAt - spawnedAt,
      spawnToAllJoinedMs: Number(joined) - spawnedAt,
      insertMs: insertedAt - insertStart,
      insertToFirstPublishMs: firstTs - insertStart,
      drainMs,
      perSec: Math.round((ctx.rows * 1000) / drainMs),
      lastPublishToAllMarkedMs: allMarkedAt - lastTs,
      published,
      duplicates,
      relayCpuPct: relays.map((_, i) => pct(cpuBefore[i], cpuAfter[i])),
      relayRunQueueWaitPct: relays.map((_, i) => pct(waitBefore[i], waitAfter[i])),
      machineBusyPct:
        machineBefore && machineAfter ? Math.round((100 * (machineAfter.busy - machineBefore.busy)) / (machineAfter.total - machineBefore.total)) : undefined,
      natsCpuPct: ctx.natsPid === undefined ? undefined : pct(natsBefore, natsAfter),
      relayCpuUsPerEvent: Math.round((1e6 * relays.reduce((sum, _, i) => sum + ((cpuAfter[i] ?? NaN) - (cpuBefore[i] ?? NaN)), 0)) / ctx.rows),
      natsCpuUsPerEvent: natsBefore === undefined || natsAfter === undefined ? undefined : Math.round((1e6 * (natsAfter - natsBefore)) / ctx.rows),
      exitCodes,
    };
  } finally {
    for (const r of relays) await r.child.stop(5000);
    client.close();
    rmSync(dbPath, { force: true });
    rmSync(`${dbPath}-wal`, { force: true });
    rmSync(`${dbPath}-shm`, { force: true });
  }
}

/** One relay spawned on a database already holding the backlog: spawn → first publish, and its drain. */
async function coldStart(
  ctx: { dir: string; seed: string; natsUrl: string; jsm: JetStreamManager; rows: number; leaseTtlMs: number; profileDir?: string | undefined },
  tag: string,
) {
  const dbPath = join(ctx.dir, `cold-${tag}.db`);
  copyFileSync(ctx.seed, dbPath);
  const name = `BENCH_COLD_${tag.toUpperCase()}`;
  const env = {
    DATABASE_URL: `file:${dbPath}`,
    NATS_URL: ctx.natsUrl,
    NATS_STREAM: name,
    EVENTS_SUBJECT_PREFIX: name.toLowerCase(),
    STREAM_MAX_BYTES: String(2 * 1024 ** 3),
    LOG_LEVEL: 'warn',
    RELAY_LEASE_TTL_MS: String(ctx.leaseTtlMs),
  };
  const spawnedAt = Date.now();
  const relays = await spawnRelays(1, env, ctx.profileDir);
  try {
    const info = await drained(ctx.jsm, name, ctx.rows, relays);
    const firstTs = Date.parse(info.state.first_ts);
    const drainMs = Math.max(1, Date.parse(info.state.last_ts) - firstTs);
    return { spawnToFirstPublishMs: firstTs - spawnedAt, drainMs, perSec: Math.round((ctx.rows * 1000) / drainMs) };
  } finally {
    for (const r of relays) await r.child.stop(10_000);
    await ctx.jsm.streams.delete(name).catch(() => undefined);
    rmSync(dbPath, { force: true });
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;

/** What one run measured (also saved as bench/results/relay-processes-*.json unless `save` is false). */
export type RelayProcessesResult = Awaited<ReturnType<typeof benchRelayProcesses>>;

export async function benchRelayProcesses(o: RelayProcessesOptions & { save?: boolean }) {
  const nats = await startNats();
  const dir = mkdtempSync(join(tmpdir(), 'bench-relays-'));
  const profileDir = o.profile ? mkdtempSync(join(tmpdir(), 'relay-cpuprof-')) : undefined;
  let nc: NatsConnection | undefined;
  try {
    const natsPid = findPid((argv) => argv[0]!.endsWith('nats-server') && argv.includes(String(nats.port)));
    // an empty migrated outbox, and the same database holding the backlog, built through the command path
    const t = await createServiceDb();
    const empty = join(dir, 'empty.db');
    const seed = join(dir, 'seed.db');
    await t.client.execute({ sql: 'VACUUM INTO ?', args: [empty] });
    const buildStart = performance.now();
    await o.fill(t, o.rows);
    await t.client.execute({ sql: 'VACUUM INTO ?', args: [seed] });
    const rows = (await t.client.execute('SELECT id, aggregate_type, aggregate_id, partition, payload, headers FROM outbox ORDER BY seq'))
      .rows as unknown as Row[];
    t.close();
    const avgBytes = Math.round(rows.reduce((s, r) => s + r.payload.length, 0) / rows.length);
    console.log(
      `backlog: ${o.rows} rows of ~${avgBytes} B built in ${Math.round(performance.now() - buildStart)} ms; ${cpus().length} CPUs; lease TTL ${o.leaseTtlMs} ms`,
    );

    nc = await connect({ servers: [nats.url] });
    const jsm = await jetstreamManager(nc);
    const messages = rawMessages(rows);
    const rawRunBefore = await rawPublish(nats.url, jsm, 'RAW_BEFORE', messages, natsPid);
    const rawBefore = rawRunBefore.perSec;
    console.log(
      `raw pipelined publish (before): ${Math.round(rawBefore)} msg/s, CPU ${rawRunBefore.cpuUsPerMsg} + ${rawRunBefore.natsCpuUsPerMsg ?? '?'} µs/msg publisher + nats`,
    );

    const columns = (await outboxColumns(seed)).filter((c) => c !== 'seq');
    const ctx = { dir, empty, seed, natsUrl: nats.url, natsPid, jsm, rows: o.rows, leaseTtlMs: o.leaseTtlMs, columns };
    const results: Array<RoundResult & { rounds: number[] }> = [];
    for (const [ci, k] of o.counts.entries()) {
      const rounds: RoundResult[] = [];
      for (let r = 0; r < o.rounds; r++) {
        const res = await runRound(k, { ...ctx, profileDir: o.profile && ci === 0 ? profileDir : undefined }, `r${k}_${r}`);
        console.log(
          `  ${k} relay(s), round ${r + 1}: drain ${res.drainMs} ms (${res.perSec} ev/s), published ${res.published.join(' + ')}, duplicates ${res.duplicates}, relay CPU ${res.relayCpuPct.join(' / ')} % (run-queue wait ${res.relayRunQueueWaitPct.join(' / ')} %), machine busy ${res.machineBusyPct ?? '?'} %, nats-server CPU ${res.natsCpuPct ?? '?'} %, CPU ${res.relayCpuUsPerEvent} + ${res.natsCpuUsPerEvent ?? '?'} µs/event, exits ${res.exitCodes.join(',')}`,
        );
        rounds.push(res);
      }
      const mid = median(rounds.map((x) => x.drainMs));
      const chosen = rounds.find((x) => x.drainMs === mid)!;
      results.push({ ...chosen, rounds: rounds.map((x) => x.perSec) });
    }
    // the cold start as often as the drains: the relay on a backlog it did not watch being written (no writer
    // checkpointing it meanwhile), its code not yet warm
    const colds: Array<Awaited<ReturnType<typeof coldStart>>> = [];
    // with --profile, the first cold start is profiled too, in a folder of its own
    const coldProfileDir = o.profile ? mkdtempSync(join(tmpdir(), 'relay-cold-cpuprof-')) : undefined;
    for (let r = 0; r < o.rounds; r++) colds.push(await coldStart({ ...ctx, profileDir: r === 0 ? coldProfileDir : undefined }, `c${r}`));
    const cold = { ...colds.find((c) => c.perSec === median(colds.map((x) => x.perSec)))!, roundsPerSec: colds.map((c) => c.perSec) };
    const rawRunAfter = await rawPublish(nats.url, jsm, 'RAW_AFTER', messages, natsPid);
    const rawAfter = rawRunAfter.perSec;
    console.log(
      `raw pipelined publish (after):  ${Math.round(rawAfter)} msg/s, CPU ${rawRunAfter.cpuUsPerMsg} + ${rawRunAfter.natsCpuUsPerMsg ?? '?'} µs/msg publisher + nats`,
    );
    const raw = (rawBefore + rawAfter) / 2;
    const one = results.find((x) => x.relays === 1)?.perSec ?? results[0]!.perSec;

    const table = results.map((x) => ({
      relays: x.relays,
      spawnToSettledMs: x.spawnToSettledMs,
      spawnToAllJoinedMs: x.spawnToAllJoinedMs,
      insertMs: x.insertMs,
      insertToFirstPublishMs: x.insertToFirstPublishMs,
      drainMs: x.drainMs,
      perSec: x.perSec,
      ratioToOneRelay: round(x.perSec / one),
      ratioToRaw: round(x.perSec / raw),
      duplicates: x.duplicates,
      relayCpuPct: x.relayCpuPct,
      relayRunQueueWaitPct: x.relayRunQueueWaitPct,
      natsCpuPct: x.natsCpuPct,
      relayCpuUsPerEvent: x.relayCpuUsPerEvent,
      natsCpuUsPerEvent: x.natsCpuUsPerEvent,
      machineBusyPct: x.machineBusyPct,
      lastPublishToAllMarkedMs: x.lastPublishToAllMarkedMs,
      roundsPerSec: x.rounds,
    }));
    const pad = (s: unknown, n: number) => String(s).padStart(n);
    console.log(
      `\nrelay processes draining ${o.rows} rows (~${avgBytes} B), raw pipelined publish ${Math.round(raw)} msg/s (before ${Math.round(rawBefore)}, after ${Math.round(rawAfter)})`,
    );
    console.log(
      'relays | spawn→all joined ms | spawn→settled ms | insert ms | insert start→1st publish ms | drain ms | ev/s   | × 1 relay | × raw | dups | relay CPU % each | run-queue wait % each | nats CPU % | machine busy % | CPU µs/event relays + nats',
    );
    for (const x of table)
      console.log(
        `${pad(x.relays, 6)} | ${pad(x.spawnToAllJoinedMs, 19)} | ${pad(x.spawnToSettledMs, 16)} | ${pad(x.insertMs, 9)} | ${pad(x.insertToFirstPublishMs, 27)} | ${pad(x.drainMs, 8)} | ${pad(x.perSec, 6)} | ${pad(x.ratioToOneRelay, 9)} | ${pad(x.ratioToRaw, 5)} | ${pad(x.duplicates, 4)} | ${pad(x.relayCpuPct.join('/'), 16)} | ${pad(x.relayRunQueueWaitPct.join('/'), 21)} | ${pad(x.natsCpuPct ?? '?', 10)} | ${pad(x.machineBusyPct ?? '?', 14)} | ${pad(`${x.relayCpuUsPerEvent} + ${x.natsCpuUsPerEvent ?? '?'}`, 26)}`,
      );
    console.log(
      `cold start: one relay spawned on the backlog published its first row ${cold.spawnToFirstPublishMs} ms after spawn, then drained at ${cold.perSec} ev/s (× raw ${round(cold.perSec / raw)}; rounds ${cold.roundsPerSec.join(', ')})`,
    );
    if (profileDir)
      console.log(
        `CPU profiles of the ${o.counts[0]}-relay run: ${readdirSync(profileDir)
          .map((f) => join(profileDir, f))
          .join(', ')}`,
      );
    if (coldProfileDir)
      console.log(
        `CPU profile of the cold start: ${readdirSync(coldProfileDir)
          .map((f) => join(coldProfileDir, f))
          .join(', ')}`,
      );
    const result = {
      bench: 'relay-processes',
      rows: o.rows,
      avgPayloadBytes: avgBytes,
      cpus: cpus().length,
      leaseTtlMs: o.leaseTtlMs,
      rawPublishPerSec: { before: Math.round(rawBefore), after: Math.round(rawAfter) },
      rawCpuUsPerMsg: {
        publisher: round((rawRunBefore.cpuUsPerMsg + rawRunAfter.cpuUsPerMsg) / 2, 1),
        nats:
          rawRunBefore.natsCpuUsPerMsg === undefined || rawRunAfter.natsCpuUsPerMsg === undefined
            ? undefined
            : round((rawRunBefore.natsCpuUsPerMsg + rawRunAfter.natsCpuUsPerMsg) / 2, 1),
      },
      relays: table,
      coldStart: { ...cold, ratioToRaw: round(cold.perSec / raw) },
    };
    if (o.save !== false) console.log(`results: ${saveResult('relay-processes', result)}`);
    return result;
  } finally {
    await nc?.close();
    await nats[Symbol.asyncDispose]();
    rmSync(dir, { recursive: true, force: true });
  }
}
