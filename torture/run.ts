// npm run torture -- --seed <n> [--commands N --kills K --broker-restarts R --pauses P --rate R --concurrency C]
//   [--relays N --subscriber-instances M --cluster]
// Real processes of the test fixture's service (API, relays, the balances and audit subscribers, nats-server or a
// three-node JetStream cluster), a client-side ledger, seeded faults, then a check. It runs the fixture
// (test/support/fixture), never the example context, so it keeps working in a clone that deleted the example.
import { createClient } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FAULT_ENTRY, FIXTURE_ENTRY, freePort, runtimeCommand, spawnChild, type ChildHandle } from '../test/support/process.ts';
import { ensureStream } from '../src/nats/ensure-stream.ts';
import type { StreamSettings } from '../src/nats/stream-settings.ts';
import { durableNameOf } from '../src/service-name.ts';
import { backlogPhase } from './backlog.ts';
import { startBroker } from './broker.ts';
import { checkRun, type CheckReport } from './check.ts';
import { runLoad, type LedgerEntry } from './load.ts';
import { buildSchedule, type Fault, type ProcessName } from './schedule.ts';

export type TortureOptions = {
  seed: number;
  commands: number;
  kills: number;
  brokerRestarts: number;
  pauses: number;
  rate: number;
  concurrency: number;
  /**
   * Rows queued while the broker is down after the main load (0: no backlog phase). The phase also opens one
   * poison account (its opened event is larger than the stream accepts), and credits and closes it halfway
   * through the backlog.
   */
  backlog?: number;
  /** How long the balances subscriber's database stays write-locked while the backlog drains (0: no lock phase). */
  lockSubscriberMs?: number;
  /** A deliberately broken variant, to prove the checker can fail: `no-inbox` or `mark-before-puback`. */
  broken?: 'no-inbox' | 'mark-before-puback';
  /** Relay processes sharing the outbox partitions through leases (default 1); each is killed and restarted on the schedule. */
  relays?: number;
  /**
   * Processes per subscriber, run with CONSUMER_PARTITIONED=true (one durable per partition, leased by the
   * instances). Unset: one process per subscriber with the single durable.
   */
  subscriberInstances?: number;
  /** A three-node JetStream cluster with the stream at three replicas; broker restarts then take one node (the stream's leader). */
  cluster?: boolean;
  /** RELAY_LEASE_TTL_MS of the relays and the subscribers (default 2000: takeovers happen within the run). */
  leaseTtlMs?: number;
  /** OUTBOX_PARTITIONS (default 16). */
  partitions?: number;
  keep?: boolean;
  log?: (line: string) => void;
};

/** How the run was deployed. */
export type Topology = { relays: number; subscriberInstances: number; partitioned: boolean; cluster: boolean; partitions: number; leaseTtlMs: number };
/**
 * Lease acquisitions of one scope, from the epochs in its database: every acquisition bumps a partition's epoch, so
 * `acquisitions` is their sum and `takeovers` what came after each partition's first (a partition taken over from a
 * killed, paused or stopped instance, or handed over when the fair share changed).
 */
export type LeaseCount = { partitions: number; acquisitions: number; takeovers: number };

export type TortureResult = CheckReport & {
  seed: number;
  injected: Record<string, number>;
  schedule: Fault[];
  ledger: number;
  seconds: number;
  dir: string;
  topology: Topology;
  /** By lease database: `relay` (the service database) and each subscriber's; absent where the table is missing or empty. */
  leases: Record<string, LeaseCount>;
  /** SIGKILLs by process (`relay-2`, `balances-1`, … or the kind's name when it runs one process). */
  killsByProcess: Record<string, number>;
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ACK_WAIT_MS = 2000;
const MAX_DELIVER = 3;
const MAX_BACKOFF_MS = 1000;
/** The whole delivery budget of a message: max_deliver deliveries, each waiting out ack_wait plus a nak delay. */
export const DELIVERY_BUDGET_MS = MAX_DELIVER * (ACK_WAIT_MS + MAX_BACKOFF_MS);
/** The stream's largest message in this run, as an operator might have set it: the poison account's event is larger. */
const MAX_MSG_SIZE = 8192;
/** The processes run with the default SERVICE_NAME; the operator created its default stream and subject prefix. */
const SERVICE = 'hono-outbox';
const STREAM = 'HONO_OUTBOX';
const PREFIX = 'hono-outbox';
/** The fixture's subscribers, each in a process of its own. */
const SUBSCRIBERS = ['balances', 'audit'] as const;
/** The subscriber whose database the lock phase write-locks. */
const LOCKED_SUBSCRIBER = 'balances';
/** The default lease TTL of a run: short, so leases of killed and paused processes are taken over within it. */
export const TORTURE_LEASE_TTL_MS = 2000;
const KINDS: readonly ProcessName[] = ['api', 'relay', 'balances', 'audit'];

/** Runs one torture configuration end to end and returns the check report (it never throws for violations). */
export async function runTorture(o: TortureOptions): Promise<TortureResult> {
  const log = o.log ?? ((l: string) => console.error(l));
  const began = performance.now();
  const dir = mkdtempSync(join(tmpdir(), `torture-${o.seed}-`));
  const partitioned = o.subscriberInstances !== undefined;
  const topology: Topology = {
    relays: Math.max(1, o.relays ?? 1),
    subscriberInstances: Math.max(1, o.subscriberInstances ?? 1),
    partitioned,
    cluster: o.cluster ?? false,
    partitions: o.partitions ?? 16,
    leaseTtlMs: o.leaseTtlMs ?? TORTURE_LEASE_TTL_MS,
  };
  const broker = await startBroker({ cluster: topology.cluster, dir, log });
  const apiPort = await freePort();
  const env: Record<string, string> = {
    DATABASE_URL: `file:${join(dir, 'app.db')}`,
    CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(dir, '{name}.db')}`,
    NATS_URL: broker.url,
    LOG_LEVEL: 'error',
    HOST: '127.0.0.1',
    RELAY_POLL_MS: '50',
    RELAY_BACKOFF_BASE_MS: '100',
    RELAY_MAX_BACKOFF_MS: String(MAX_BACKOFF_MS),
    RELAY_PUBLISH_TIMEOUT_MS: '2000',
    CONSUMER_ACK_WAIT_MS: String(ACK_WAIT_MS),
    CONSUMER_MAX_DELIVER: String(MAX_DELIVER),
    RELAY_LEASE_TTL_MS: String(topology.leaseTtlMs),
    OUTBOX_PARTITIONS: String(topology.partitions),
    STREAM_REPLICAS: String(broker.replicas),
    ...(partitioned ? { CONSUMER_PARTITIONED: 'true' } : {}),
  };
  // The broken variants run the fault entry (crash hooks live in test code only), the fixture's entry otherwise;
  // a broken subscriber also dies once between commit and ack (the first of its instances to get there), so a
  // redelivery is certain.
  const brokenSubscriber = (name: string) => (o.broken === 'no-inbox' ? `no-inbox,kill-after-commit:10:${join(dir, `${name}.crashed`)}` : undefined);
  const commands: Record<ProcessName, ProcessCommand> = {
    api: { entry: FIXTURE_ENTRY, args: [], env: { ROLES: 'api', PORT: String(apiPort) } },
    relay: roleCommand({ ROLES: 'relay' }, ['relay'], o.broken === 'mark-before-puback' ? 'mark-before-puback' : undefined),
    balances: roleCommand({ ROLES: 'consumers', CONSUMERS: 'balances' }, ['consume', 'balances'], brokenSubscriber('balances')),
    audit: roleCommand({ ROLES: 'consumers', CONSUMERS: 'audit' }, ['consume', 'audit'], brokenSubscriber('audit')),
  };
  const instances: Record<ProcessName, number> = {
    api: 1,
    relay: topology.relays,
    balances: topology.subscriberInstances,
    audit: topology.subscriberInstances,
  };
  /** Every process of the run: `<kind>-<n>` (n from 1), or the kind's name alone when it runs one. */
  const processId = (kind: ProcessName, i: number) => (instances[kind] === 1 ? kind : `${kind}-${i + 1}`);
  const processes = KINDS.flatMap((kind) => Array.from({ length: instances[kind] }, (_, i) => ({ id: processId(kind, i), kind })));
  const procs = new Map<string, ChildHandle>();
  const start = (p: { id: string; kind: ProcessName }) => {
    const c = commands[p.kind];
    const { cmd, args } = runtimeCommand('node', c.entry);
    procs.set(p.id, spawnChild(cmd, [...args, ...c.args], { ...env, ...c.env, INSTANCE_NAME: p.id }));
  };
  const alive = (id: string) => {
    const p = procs.get(id)?.proc;
    return !!p && p.exitCode === null && p.signalCode === null;
  };
  const restarting = new Set<string>();
  const killsByProcess: Record<string, number> = {};
  const injected: Record<string, number> = { 'kill api': 0, 'kill relay': 0, 'kill balances': 0, 'kill audit': 0, 'broker restart': 0, pause: 0 };
  if (topology.cluster) injected['broker restart of the stream leader'] = 0;

  try {
    // the operator's stream, created before any process: the relay and subscribers adopt it as it is
    await createOperatorStream(
      broker.servers,
      {
        name: STREAM,
        prefix: PREFIX,
        maxBytes: 1024 * 1024 * 1024,
        maxAgeMs: 7 * 24 * 3600 * 1000,
        duplicateWindowMs: 10 * 60 * 1000,
        maxMsgSize: MAX_MSG_SIZE,
        maxBackoffMs: MAX_BACKOFF_MS,
      },
      broker.replicas,
    );
    processes.forEach(start);
    // every process of the topology starts at once: on two busy cores that can take well over 30 s
    await waitFor(async () => (await fetch(`http://127.0.0.1:${apiPort}/health`).catch(() => undefined))?.ok === true, 90_000, 'API start');
    // a relay applies OUTBOX_PARTITIONS at start, and refuses to change it once rows are pending: no command before
    await waitFor(async () => (await partitionCount(env.DATABASE_URL!)) === topology.partitions, 60_000, 'the relays applying OUTBOX_PARTITIONS');

    const schedule = buildSchedule({
      seed: o.seed,
      commands: o.commands,
      kills: o.kills,
      brokerRestarts: o.brokerRestarts,
      pauses: o.pauses,
      pauseMs: Math.max(ACK_WAIT_MS, 1000) + 1500,
      instances,
    });
    const due = [...schedule];
    const running: Promise<void>[] = [];
    const fire = async (f: Fault) => {
      if (f.kind === 'kill') {
        const id = processId(f.target, f.instance);
        injected[`kill ${f.target}`]!++;
        killsByProcess[id] = (killsByProcess[id] ?? 0) + 1;
        restarting.add(id);
        await procs.get(id)?.kill9();
        await sleep(f.restartAfterMs);
        start({ id, kind: f.target });
        restarting.delete(id);
      } else if (f.kind === 'pause') {
        const id = processId(f.target, f.instance);
        const p = procs.get(id);
        if (!p || !alive(id)) return;
        injected.pause!++;
        p.proc.kill('SIGSTOP');
        await sleep(f.forMs);
        p.proc.kill('SIGCONT');
      } else {
        injected['broker restart']!++;
        const { node, leader } = await broker.restartOne(STREAM, f.downForMs);
        if (topology.cluster && leader) injected['broker restart of the stream leader']!++;
        if (topology.cluster) log(`torture: broker node ${node}${leader ? ' (the stream leader)' : ''} killed and restarted`);
      }
    };
    // a supervisor: processes that died by themselves (test faults) come back after a moment
    const watchdog = setInterval(() => {
      for (const p of processes) if (!alive(p.id) && !restarting.has(p.id)) start(p);
    }, 500);
    let busy: Promise<void> = Promise.resolve();
    const ledger: LedgerEntry[] = await runLoad({
      baseUrl: () => `http://127.0.0.1:${apiPort}`,
      seed: o.seed,
      commands: o.commands,
      concurrency: o.concurrency,
      rate: o.rate,
      onCommand(n) {
        while (due.length && due[0]!.at <= n) {
          const f = due.shift()!;
          // faults run one after another, so a kill never lands on a process another fault is restarting
          busy = busy.then(() => fire(f));
          running.push(busy);
        }
      },
    });
    await Promise.all(running);
    const parkedAccounts: string[] = [];
    if ((o.backlog ?? 0) > 0) {
      const lockSubscriber = lockPhase(env, o.lockSubscriberMs ?? 0, log);
      ledger.push(
        ...(await backlogPhase({
          seed: o.seed,
          backlog: o.backlog!,
          maxMsgSize: MAX_MSG_SIZE,
          baseUrl: `http://127.0.0.1:${apiPort}`,
          dbUrl: env.DATABASE_URL!,
          nats: broker,
          parkedAccounts,
          log,
          lockSubscriber,
        })),
      );
    } else if ((o.lockSubscriberMs ?? 0) > 0) {
      await lockPhase(env, o.lockSubscriberMs!, log)();
    }

    // restart anything down, then wait (bounded) until the outbox is drained and the subscribers caught up
    for (const p of processes) {
      if (!alive(p.id)) start(p);
      else procs.get(p.id)!.proc.kill('SIGCONT');
    }
    log(`torture: load done (${ledger.length} requests), draining`);
    const durables = partitioned ? topology.partitions : 1;
    const drainFrom = performance.now();
    await waitFor(() => drained(env.DATABASE_URL!, broker.servers, parkedAccounts, durables), 300_000, 'drain', log);
    clearInterval(watchdog);
    log(`torture: drained in ${Math.round((performance.now() - drainFrom) / 1000)} s, stopping the processes`);

    await Promise.all([...procs.values()].map((p) => p.stop('SIGTERM', 15_000).catch(() => p.kill9())));
    const subscriberDbUrls = { balances: `file:${join(dir, 'balances.db')}`, audit: `file:${join(dir, 'audit.db')}` };
    const report = await checkRun({
      apiDbUrl: env.DATABASE_URL!,
      subscriberDbUrls,
      natsUrl: broker.url,
      stream: STREAM,
      prefix: PREFIX,
      ledger,
      parkedAccounts,
    });
    const leases: Record<string, LeaseCount> = {};
    for (const [name, url] of [['relay', env.DATABASE_URL!], ...Object.entries(subscriberDbUrls)] as const) {
      const count = await countLeases(url);
      if (count) leases[name] = count;
    }
    writeFileSync(join(dir, 'ledger.json'), JSON.stringify(ledger));
    return {
      ...report,
      seed: o.seed,
      injected,
      schedule,
      ledger: ledger.length,
      seconds: Math.round((performance.now() - began) / 1000),
      dir,
      topology,
      leases,
      killsByProcess,
    };
  } finally {
    for (const p of procs.values()) await p.kill9();
    await broker[Symbol.asyncDispose]();
    if (!o.keep) rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Creates the operator's stream before any process starts: as ensureStream would, with `replicas` replicas (on a
 * cluster, retried until its meta leader answers), then checked by ensureStream as the processes will.
 */
async function createOperatorStream(servers: string[], settings: StreamSettings, replicas: number): Promise<void> {
  const until = Date.now() + 60_000;
  for (;;) {
    try {
      const admin = await connect({ servers });
      try {
        const jsm = await jetstreamManager(admin);
        await ensureStream(jsm, { ...settings, replicas });
        return;
      } finally {
        await admin.close();
      }
    } catch (error) {
      if (Date.now() > until) throw error;
      await sleep(500);
    }
  }
}

/** The partition count the outbox is spread over now (outbox_partitions). */
async function partitionCount(url: string): Promise<number> {
  const c = createClient({ url });
  try {
    return Number((await c.execute('SELECT count FROM outbox_partitions WHERE id = 1')).rows[0]?.count);
  } finally {
    c.close();
  }
}

/** The lease acquisitions recorded in the `leases` table of the database at `url` (every scope in it); undefined without one. */
async function countLeases(url: string): Promise<LeaseCount | undefined> {
  const c = createClient({ url });
  try {
    const row = (await c.execute('SELECT count(*) AS partitions, coalesce(sum(epoch), 0) AS acquisitions FROM leases WHERE epoch > 0')).rows[0]!;
    const partitions = Number(row.partitions);
    const acquisitions = Number(row.acquisitions);
    return partitions === 0 ? undefined : { partitions, acquisitions, takeovers: acquisitions - partitions };
  } catch {
    return undefined;
  } finally {
    c.close();
  }
}

type ProcessCommand = { entry: string; args: string[]; env: Record<string, string> };

/**
 * A process of the fixture service with the roles in `env`: the fixture's entry, or with `faults`
 * (HONO_OUTBOX_TEST_FAULT) the fault entry running the fixture (`--fixture`, then `faultArgs`).
 */
function roleCommand(env: Record<string, string>, faultArgs: string[], faults: string | undefined): ProcessCommand {
  return faults ? { entry: FAULT_ENTRY, args: ['--fixture', ...faultArgs], env: { HONO_OUTBOX_TEST_FAULT: faults } } : { entry: FIXTURE_ENTRY, args: [], env };
}

/** Returns a function that write-locks the balances subscriber's database for `ms` (in the background) and resolves once it holds the lock. */
function lockPhase(env: Record<string, string>, ms: number, log: (l: string) => void): () => Promise<void> {
  return async () => {
    if (ms <= 0) return;
    const c = createClient({ url: env.CONSUMER_DATABASE_URL_TEMPLATE!.replace('{name}', LOCKED_SUBSCRIBER), timeout: 30_000 });
    const tx = await c.transaction('write');
    log(`torture: ${LOCKED_SUBSCRIBER}'s database write-locked for ${ms} ms (delivery budget ${DELIVERY_BUDGET_MS} ms)`);
    void sleep(ms).then(async () => {
      await tx.rollback().catch(() => undefined);
      tx.close();
      c.close();
      log(`torture: ${LOCKED_SUBSCRIBER}'s database unlocked`);
    });
  };
}

let lastDrainState = '';
/**
 * True once no outbox row is pending (the poison account's aside, its first row parked) and every durable of each
 * subscriber (`<service>-<subscriber>`, or one per partition named after it: at least `durables` of them) has
 * nothing pending or awaiting an ack.
 */
async function drained(dbUrl: string, servers: string[], parkedAccounts: string[], durables: number): Promise<boolean> {
  const c = createClient({ url: dbUrl });
  let pending: number;
  let parked: number;
  try {
    const args = [JSON.stringify(parkedAccounts)];
    pending = Number(
      (await c.execute({ sql: "SELECT count(*) FROM outbox WHERE status = 'pending' AND aggregate_id NOT IN (SELECT value FROM json_each(?))", args }))
        .rows[0]![0],
    );
    // a poison row is retried (with back-off) until RELAY_MAX_ATTEMPTS before it is parked
    parked = Number(
      (await c.execute({ sql: "SELECT count(*) FROM outbox WHERE status = 'failed' AND aggregate_id IN (SELECT value FROM json_each(?))", args })).rows[0]![0],
    );
  } finally {
    c.close();
  }
  lastDrainState = `outbox pending ${pending}, poison rows parked ${parked} of ${parkedAccounts.length}`;
  if (pending > 0 || parked < parkedAccounts.length) return false;
  const nc = await connect({ servers, maxReconnectAttempts: 0 }).catch(() => undefined);
  if (!nc) return false;
  try {
    const jsm = await jetstreamManager(nc);
    const consumers: { name: string; num_pending: number; num_ack_pending: number; num_redelivered: number }[] = [];
    for await (const info of jsm.consumers.list(STREAM)) consumers.push({ ...info, name: info.name });
    for (const name of SUBSCRIBERS) {
      const durable = durableNameOf(SERVICE, name);
      const mine = consumers.filter((i) => i.name === durable || i.name.startsWith(`${durable}-`));
      const sum = (k: 'num_pending' | 'num_ack_pending' | 'num_redelivered') => mine.reduce((n, i) => n + i[k], 0);
      lastDrainState = `consumer ${name}: ${mine.length} of ${durables} durables, pending ${sum('num_pending')}, awaiting ack ${sum('num_ack_pending')}, redelivered ${sum('num_redelivered')}`;
      if (mine.length < durables || sum('num_pending') > 0 || sum('num_ack_pending') > 0) return false;
    }
    return true;
  } finally {
    await nc.close();
  }
}

/** Polls `check` until it holds; with `log`, says where the wait stands every 5 s. */
async function waitFor(check: () => Promise<boolean>, timeoutMs: number, what: string, log?: (line: string) => void): Promise<void> {
  const until = Date.now() + timeoutMs;
  let next = Date.now() + 5000;
  while (!(await check().catch(() => false))) {
    if (Date.now() > until) throw new Error(`torture: ${what} did not finish within ${timeoutMs} ms (${lastDrainState})`);
    if (log && Date.now() > next) {
      next = Date.now() + 5000;
      log(`torture: ${what}: ${lastDrainState}`);
    }
    await sleep(200);
  }
}

/** Prints the counts table (with the topology and the lease takeovers) and the injected faults. */
export function formatReport(r: TortureResult): string {
  const rows = [
    ['acknowledged', r.counts.acknowledged],
    ['rejected', r.counts.rejected],
    ['unknown → present', r.counts.unknownPresent],
    ['unknown → absent', r.counts.unknownAbsent],
    ['lost', r.counts.lost],
    ['duplicated effects', r.counts.duplicatedEffects],
    ['phantoms', r.counts.phantoms],
    ['order violations', r.counts.orderViolations],
    ['outbox pending / failed', `${r.counts.pendingOutbox} / ${r.counts.failedOutbox}`],
    ['inbox gaps', r.counts.inboxGaps],
    ['dead letters', r.counts.deadLetters],
    ['relays', r.topology.relays],
    [
      'subscriber instances',
      r.topology.partitioned
        ? `${r.topology.subscriberInstances} per subscriber (partitioned consumers, ${r.topology.partitions} partitions)`
        : `${r.topology.subscriberInstances} per subscriber`,
    ],
    ['broker', r.topology.cluster ? '3-node JetStream cluster, stream R3' : 'one nats-server'],
    ...Object.entries(r.leases).map(
      ([scope, l]) =>
        [
          `${scope} lease takeovers and hand-overs`,
          `${l.takeovers} (${l.acquisitions} acquisitions of ${l.partitions} partitions, TTL ${r.topology.leaseTtlMs} ms)`,
        ] as const,
    ),
  ];
  const faults = Object.entries(r.injected)
    .map(([k, n]) => `${k}: ${n}`)
    .join(', ');
  return [
    `torture seed ${r.seed}: ${r.ledger} requests in ${r.seconds} s`,
    '| check | count |',
    '|---|---|',
    ...rows.map(([k, n]) => `| ${k} | ${n} |`),
    `faults injected: ${faults}`,
    ...(r.topology.relays > 1 || r.topology.subscriberInstances > 1
      ? [
          `kills by process: ${Object.entries(r.killsByProcess)
            .sort(([a], [b]) => a.localeCompare(b))
            .map(([k, n]) => `${k} ${n}`)
            .join(', ')}`,
        ]
      : []),
    ...(r.violations.length ? ['violations:', ...r.violations.map((x) => `  - ${x}`)] : []),
  ].join('\n');
}

export function violationCount(r: CheckReport): number {
  const c = r.counts;
  return c.lost + c.duplicatedEffects + c.phantoms + c.orderViolations + c.pendingOutbox + c.failedOutbox + c.inboxGaps + c.deadLetters;
}
