// npm run torture -- --seed <n> [--commands N --kills K --broker-restarts R --pauses P --rate R --concurrency C]
// Real processes (API, relay, two subscribers, nats-server), a client-side ledger, seeded faults, then a check.
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNats } from '../test/support/nats.ts';
import { FAULT_ENTRY, freePort, runtimeCommand, spawnChild, type ChildHandle } from '../test/support/process.ts';
import { ensureStream } from '../src/nats/ensure-stream.ts';
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
   * Rows queued while the broker is down after the main load (0: no backlog phase). The phase also places one
   * poison order (its event is larger than the stream accepts) and cancels it halfway through the backlog.
   */
  backlog?: number;
  /** How long the reporting subscriber's database stays write-locked while the backlog drains (0: no lock phase). */
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
/** The stream's largest message in this run, as an operator might have set it: the poison order's event is larger. */
const MAX_MSG_SIZE = 8192;

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
  const commands: Record<ProcessName, { entry: string; args: string[]; env: Record<string, string> }> = {
    api: { entry: 'src/entry/node.ts', args: [], env: { ROLES: 'api', PORT: String(apiPort) } },
    // the broken variants run the fault entry (crash hooks live in test code only); the production entries otherwise
    relay: o.broken === 'mark-before-puback' ? { entry: FAULT_ENTRY, args: ['relay'], env: { HONO_OUTBOX_TEST_FAULT: 'mark-before-puback' } } : { entry: 'src/entry/relay.ts', args: [], env: {} },
    // the broken subscriber also dies once between commit and ack, so a redelivery is certain
    reporting: subscriberCommand('reporting', o.broken === 'no-inbox' ? `no-inbox,kill-after-commit:10:${join(dir, 'reporting.crashed')}` : undefined),
    notifications: subscriberCommand('notifications', o.broken === 'no-inbox' ? `no-inbox,kill-after-commit:10:${join(dir, 'notifications.crashed')}` : undefined),
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
  const injected: Record<string, number> = { 'kill api': 0, 'kill relay': 0, 'kill reporting': 0, 'kill notifications': 0, 'broker restart': 0, pause: 0 };

  try {
    // the operator's stream, created before any process: the relay and subscribers adopt it as it is
    const admin = await connect({ servers: [nats.url] });
    await ensureStream(await jetstreamManager(admin), {
      name: 'EVENTS',
      prefix: 'events',
      maxBytes: 1024 * 1024 * 1024,
      maxAgeMs: 7 * 24 * 3600 * 1000,
      duplicateWindowMs: 10 * 60 * 1000,
      maxMsgSize: MAX_MSG_SIZE,
      maxBackoffMs: MAX_BACKOFF_MS,
    });
    await admin.close();
    (Object.keys(commands) as ProcessName[]).forEach(start);
    await waitFor(async () => (await fetch(`http://127.0.0.1:${apiPort}/health`).catch(() => undefined))?.ok === true, 30_000, 'API start');

    const schedule = buildSchedule({ seed: o.seed, commands: o.commands, kills: o.kills, brokerRestarts: o.brokerRestarts, pauses: o.pauses, pauseMs: Math.max(ACK_WAIT_MS, 1000) + 1500 });
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
    const parkedOrders: string[] = [];
    if ((o.backlog ?? 0) > 0) {
      ledger.push(...(await backlogPhase({ ...o, backlog: o.backlog!, apiPort, dbUrl: env.DATABASE_URL!, nats, parkedOrders, log, lockReporting: lockPhase(env, o.lockSubscriberMs ?? 0, log) })));
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
    await waitFor(() => drained(env.DATABASE_URL!, nats.url, parkedOrders), 300_000, 'drain');
    clearInterval(watchdog);

    for (const p of procs.values()) await p.stop('SIGTERM', 15_000).catch(() => p.kill9());
    const report = await checkRun({
      apiDbUrl: env.DATABASE_URL!,
      subscriberDbUrls: { reporting: `file:${join(dir, 'reporting.db')}`, notifications: `file:${join(dir, 'notifications.db')}` },
      natsUrl: nats.url,
      stream: 'EVENTS',
      ledger,
      parkedOrders,
    });
    writeFileSync(join(dir, 'ledger.json'), JSON.stringify(ledger));
    return { ...report, seed: o.seed, injected, schedule, ledger: ledger.length, seconds: Math.round((performance.now() - began) / 1000), dir };
  } finally {
    for (const p of procs.values()) await p.kill9();
    await nats[Symbol.asyncDispose]();
    if (!o.keep) rmSync(dir, { recursive: true, force: true });
  }
}

/** A subscriber's process: the production entry, or the fault entry with `faults` (HONO_OUTBOX_TEST_FAULT). */
function subscriberCommand(name: string, faults: string | undefined): { entry: string; args: string[]; env: Record<string, string> } {
  return faults ? { entry: FAULT_ENTRY, args: ['consume', name], env: { HONO_OUTBOX_TEST_FAULT: faults } } : { entry: 'src/entry/consume.ts', args: [name], env: {} };
}

/**
 * The backlog phase: the broker goes down, `backlog` commands queue their rows in the outbox (one poison order
 * among them, cancelled halfway through, so its aggregate has a later event held behind a row the stream
 * refuses), then the broker comes back and, while the backlog drains, the reporting subscriber's database is
 * locked past its whole delivery budget (when a lock phase is asked for). Returns the phase's ledger.
 */
async function backlogPhase(p: TortureOptions & { backlog: number; apiPort: number; dbUrl: string; nats: Awaited<ReturnType<typeof startNats>>; parkedOrders: string[]; log: (l: string) => void; lockReporting: () => Promise<void> }): Promise<LedgerEntry[]> {
  const baseUrl = () => `http://127.0.0.1:${p.apiPort}`;
  await p.nats.kill();
  const items = Array.from({ length: 100 }, (_, i) => ({ sku: `poison-${'x'.repeat(50)}-${i}`, quantity: 1, unitPriceCents: 100 }));
  const poison = await postCommand(baseUrl(), '/orders', `place-poison-${p.seed}`, { customerId: 'poison', currency: 'EUR', items });
  const orderId = poison.body.orderId as string;
  p.parkedOrders.push(orderId);
  // commands until the outbox holds `backlog` pending rows, the poison order's cancellation in the middle
  const load = async (seed: number, rows: number) => {
    const out: LedgerEntry[] = [];
    for (let round = 0; (await countPending(p.dbUrl)) < rows; round++) {
      const missing = rows - (await countPending(p.dbUrl));
      out.push(...(await runLoad({ baseUrl, seed: seed * 100 + round, commands: Math.max(10, Math.ceil(missing * 1.1)), concurrency: 32, rate: 100_000, requestTimeoutMs: 30_000 })));
    }
    return out;
  };
  const first = await load(p.seed * 1000 + 1, Math.ceil(p.backlog / 2));
  const cancel = await postCommand(baseUrl(), `/orders/${orderId}/cancel`, `cancel-poison-${p.seed}`, { reason: 'poison' });
  const second = await load(p.seed * 1000 + 2, p.backlog);
  p.log(`torture: ${await countPending(p.dbUrl)} rows queued with the broker down (${first.length + second.length + 2} commands)`);
  await p.nats.restart();
  await p.lockReporting();
  const entry = (n: number, kind: LedgerEntry['kind'], path: string, key: string, body: unknown, res: { status: number }): LedgerEntry => ({
    n, kind, key, path, body: JSON.stringify(body), outcome: res.status < 300 ? 'ack' : 'rejected', status: res.status, orderId,
  });
  return [
    entry(-2, 'place', '/orders', `place-poison-${p.seed}`, { customerId: 'poison', currency: 'EUR', items }, poison),
    ...first.map((e) => ({ ...e, n: 1_000_000 + e.n })),
    entry(-1, 'cancel', `/orders/${orderId}/cancel`, `cancel-poison-${p.seed}`, { reason: 'poison' }, cancel),
    ...second.map((e) => ({ ...e, n: 2_000_000 + e.n })),
  ];
}

/** One command with its Idempotency-Key; throws unless it is acknowledged (the phase needs both commands). */
async function postCommand(baseUrl: string, path: string, key: string, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  for (let tries = 0; ; tries++) {
    const res = await fetch(`${baseUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: JSON.stringify(body) }).catch(() => undefined);
    if (res && res.status < 300) return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    if (tries > 100) throw new Error(`torture: ${path} answered ${res?.status ?? 'nothing'}: ${await res?.text()}`);
    await sleep(100);
  }
}

/** Returns a function that write-locks the reporting subscriber's database for `ms` (in the background) and resolves once it holds the lock. */
function lockPhase(env: Record<string, string>, ms: number, log: (l: string) => void): () => Promise<void> {
  return async () => {
    if (ms <= 0) return;
    const { createClient } = await import('@libsql/client');
    const c = createClient({ url: env.CONSUMER_DATABASE_URL_TEMPLATE!.replace('{name}', 'reporting'), timeout: 30_000 });
    const tx = await c.transaction('write');
    log(`torture: reporting's database write-locked for ${ms} ms (delivery budget ${DELIVERY_BUDGET_MS} ms)`);
    void sleep(ms).then(async () => {
      await tx.rollback().catch(() => undefined);
      tx.close();
      c.close();
      log('torture: reporting\'s database unlocked');
    });
  };
}

async function countPending(dbUrl: string): Promise<number> {
  const { createClient } = await import('@libsql/client');
  const c = createClient({ url: dbUrl });
  try {
    return Number((await c.execute("SELECT count(*) FROM outbox WHERE status = 'pending'")).rows[0]![0]);
  } finally {
    c.close();
  }
}

let lastDrainState = '';
async function drained(dbUrl: string, natsUrl: string, parkedOrders: string[]): Promise<boolean> {
  const { createClient } = await import('@libsql/client');
  const c = createClient({ url: dbUrl });
  let pending: number;
  try {
    pending = Number((await c.execute({ sql: "SELECT count(*) FROM outbox WHERE status = 'pending' AND aggregate_id NOT IN (SELECT value FROM json_each(?))", args: [JSON.stringify(parkedOrders)] })).rows[0]![0]);
  } finally {
    c.close();
  }
  lastDrainState = `outbox pending ${pending}`;
  if (pending > 0) return false;
  const nc = await connect({ servers: [natsUrl], maxReconnectAttempts: 0 }).catch(() => undefined);
  if (!nc) return false;
  try {
    const jsm = await jetstreamManager(nc);
    for (const name of ['reporting', 'notifications']) {
      const info = await jsm.consumers.info('EVENTS', name).catch(() => undefined);
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
  const faults = Object.entries(r.injected).map(([k, n]) => `${k}: ${n}`).join(', ');
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
