// npm run torture -- --seed <n> [--commands N --kills K --broker-restarts R --pauses P --rate R --concurrency C]
// Real processes of the test fixture's service (API, relay, the balances and audit subscribers, nats-server), a
// client-side ledger, seeded faults, then a check. It runs the fixture (test/support/fixture), never the example
// context, so it keeps working in a clone that deleted the example.
import { createClient } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNats } from '../test/support/nats.ts';
import { FAULT_ENTRY, FIXTURE_ENTRY, freePort, runtimeCommand, spawnChild, type ChildHandle } from '../test/support/process.ts';
import { ensureStream } from '../src/nats/ensure-stream.ts';
import { durableNameOf } from '../src/service-name.ts';
import { backlogPhase } from './backlog.ts';
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
  keep?: boolean;
  log?: (line: string) => void;
};

export type TortureResult = CheckReport & { seed: number; injected: Record<string, number>; schedule: Fault[]; ledger: number; seconds: number; dir: string };

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

/** Runs one torture configuration end to end and returns the check report (it never throws for violations). */
export async function runTorture(o: TortureOptions): Promise<TortureResult> {
  const log = o.log ?? ((l: string) => console.error(l));
  const began = performance.now();
  const dir = mkdtempSync(join(tmpdir(), `torture-${o.seed}-`));
  const nats = await startNats();
  const apiPort = await freePort();
  const env: Record<string, string> = {
    DATABASE_URL: `file:${join(dir, 'app.db')}`,
    CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(dir, '{name}.db')}`,
    NATS_URL: nats.url,
    LOG_LEVEL: 'error',
    HOST: '127.0.0.1',
    RELAY_POLL_MS: '50',
    RELAY_BACKOFF_BASE_MS: '100',
    RELAY_MAX_BACKOFF_MS: String(MAX_BACKOFF_MS),
    RELAY_PUBLISH_TIMEOUT_MS: '2000',
    CONSUMER_ACK_WAIT_MS: String(ACK_WAIT_MS),
    CONSUMER_MAX_DELIVER: String(MAX_DELIVER),
  };
  // The broken variants run the fault entry (crash hooks live in test code only), the fixture's entry otherwise;
  // a broken subscriber also dies once between commit and ack, so a redelivery is certain.
  const brokenSubscriber = (name: string) => (o.broken === 'no-inbox' ? `no-inbox,kill-after-commit:10:${join(dir, `${name}.crashed`)}` : undefined);
  const commands: Record<ProcessName, ProcessCommand> = {
    api: { entry: FIXTURE_ENTRY, args: [], env: { ROLES: 'api', PORT: String(apiPort) } },
    relay: roleCommand({ ROLES: 'relay' }, ['relay'], o.broken === 'mark-before-puback' ? 'mark-before-puback' : undefined),
    balances: roleCommand({ ROLES: 'consumers', CONSUMERS: 'balances' }, ['consume', 'balances'], brokenSubscriber('balances')),
    audit: roleCommand({ ROLES: 'consumers', CONSUMERS: 'audit' }, ['consume', 'audit'], brokenSubscriber('audit')),
  };
  const procs = new Map<ProcessName, ChildHandle>();
  const start = (name: ProcessName) => {
    const c = commands[name];
    const { cmd, args } = runtimeCommand('node', c.entry);
    procs.set(name, spawnChild(cmd, [...args, ...c.args], { ...env, ...c.env }));
  };
  const alive = (name: ProcessName) => {
    const p = procs.get(name)?.proc;
    return !!p && p.exitCode === null && p.signalCode === null;
  };
  const restarting = new Set<ProcessName>();
  const injected: Record<string, number> = { 'kill api': 0, 'kill relay': 0, 'kill balances': 0, 'kill audit': 0, 'broker restart': 0, pause: 0 };

  try {
    // the operator's stream, created before any process: the relay and subscribers adopt it as it is
    const admin = await connect({ servers: [nats.url] });
    await ensureStream(await jetstreamManager(admin), {
      name: STREAM,
      prefix: PREFIX,
      maxBytes: 1024 * 1024 * 1024,
      maxAgeMs: 7 * 24 * 3600 * 1000,
      duplicateWindowMs: 10 * 60 * 1000,
      maxMsgSize: MAX_MSG_SIZE,
      maxBackoffMs: MAX_BACKOFF_MS,
    });
    await admin.close();
    (Object.keys(commands) as ProcessName[]).forEach(start);
    await waitFor(async () => (await fetch(`http://127.0.0.1:${apiPort}/health`).catch(() => undefined))?.ok === true, 30_000, 'API start');

    const schedule = buildSchedule({
      seed: o.seed,
      commands: o.commands,
      kills: o.kills,
      brokerRestarts: o.brokerRestarts,
      pauses: o.pauses,
      pauseMs: Math.max(ACK_WAIT_MS, 1000) + 1500,
    });
    const due = [...schedule];
    const running: Promise<void>[] = [];
    const fire = async (f: Fault) => {
      if (f.kind === 'kill') {
        injected[`kill ${f.target}`]!++;
        restarting.add(f.target);
        await procs.get(f.target)?.kill9();
        await sleep(f.restartAfterMs);
        start(f.target);
        restarting.delete(f.target);
      } else if (f.kind === 'pause') {
        const p = procs.get(f.target);
        if (!p || !alive(f.target)) return;
        injected.pause!++;
        p.proc.kill('SIGSTOP');
        await sleep(f.forMs);
        p.proc.kill('SIGCONT');
      } else {
        injected['broker restart']!++;
        await nats.kill();
        await sleep(f.downForMs);
        await nats.restart();
      }
    };
    // a supervisor: processes that died by themselves (test faults) come back after a moment
    const watchdog = setInterval(() => {
      for (const name of Object.keys(commands) as ProcessName[]) if (!alive(name) && !restarting.has(name)) start(name);
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
          nats,
          parkedAccounts,
          log,
          lockSubscriber,
        })),
      );
    } else if ((o.lockSubscriberMs ?? 0) > 0) {
      await lockPhase(env, o.lockSubscriberMs!, log)();
    }

    // restart anything down, then wait (bounded) until the outbox is drained and the subscribers caught up
    for (const name of Object.keys(commands) as ProcessName[]) {
      const p = procs.get(name);
      if (!alive(name)) start(name);
      else p!.proc.kill('SIGCONT');
    }
    log(`torture: load done (${ledger.length} requests), draining`);
    await waitFor(() => drained(env.DATABASE_URL!, nats.url, parkedAccounts), 300_000, 'drain');
    clearInterval(watchdog);

    for (const p of procs.values()) await p.stop('SIGTERM', 15_000).catch(() => p.kill9());
    const report = await checkRun({
      apiDbUrl: env.DATABASE_URL!,
      subscriberDbUrls: { balances: `file:${join(dir, 'balances.db')}`, audit: `file:${join(dir, 'audit.db')}` },
      natsUrl: nats.url,
      stream: STREAM,
      prefix: PREFIX,
      ledger,
      parkedAccounts,
    });
    writeFileSync(join(dir, 'ledger.json'), JSON.stringify(ledger));
    return { ...report, seed: o.seed, injected, schedule, ledger: ledger.length, seconds: Math.round((performance.now() - began) / 1000), dir };
  } finally {
    for (const p of procs.values()) await p.kill9();
    await nats[Symbol.asyncDispose]();
    if (!o.keep) rmSync(dir, { recursive: true, force: true });
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
async function drained(dbUrl: string, natsUrl: string, parkedAccounts: string[]): Promise<boolean> {
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
  const nc = await connect({ servers: [natsUrl], maxReconnectAttempts: 0 }).catch(() => undefined);
  if (!nc) return false;
  try {
    const jsm = await jetstreamManager(nc);
    for (const name of SUBSCRIBERS) {
      const info = await jsm.consumers.info(STREAM, durableNameOf(SERVICE, name)).catch(() => undefined);
      lastDrainState = `consumer ${name}: ${info ? `pending ${info.num_pending}, awaiting ack ${info.num_ack_pending}, redelivered ${info.num_redelivered}` : 'missing'}`;
      if (!info || info.num_pending > 0 || info.num_ack_pending > 0) return false;
    }
    return true;
  } finally {
    await nc.close();
  }
}

async function waitFor(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > until) throw new Error(`torture: ${what} did not finish within ${timeoutMs} ms (${lastDrainState})`);
    await sleep(200);
  }
}

/** Prints the counts table and the injected faults. */
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
    ...(r.violations.length ? ['violations:', ...r.violations.map((x) => `  - ${x}`)] : []),
  ].join('\n');
}

export function violationCount(r: CheckReport): number {
  const c = r.counts;
  return c.lost + c.duplicatedEffects + c.phantoms + c.orderViolations + c.pendingOutbox + c.failedOutbox + c.inboxGaps + c.deadLetters;
}
