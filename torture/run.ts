// npm run torture -- --seed <n> [--commands N --kills K --broker-restarts R --pauses P --rate R --concurrency C]
// Real processes (API, relay, two subscribers, nats-server), a client-side ledger, seeded faults, then a check.
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNats } from '../test/support/nats.ts';
import { freePort, runtimeCommand, spawnChild, type ChildHandle } from '../test/support/process.ts';
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
  /** A deliberately broken variant, to prove the checker can fail: `no-inbox` or `mark-before-puback`. */
  broken?: 'no-inbox' | 'mark-before-puback';
  keep?: boolean;
  log?: (line: string) => void;
};

export type TortureResult = CheckReport & { seed: number; injected: Record<string, number>; schedule: Fault[]; ledger: number; seconds: number; dir: string };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ACK_WAIT_MS = 2000;

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
    RELAY_MAX_BACKOFF_MS: '1000',
    RELAY_PUBLISH_TIMEOUT_MS: '2000',
    CONSUMER_ACK_WAIT_MS: String(ACK_WAIT_MS),
  };
  const commands: Record<ProcessName, { entry: string; args: string[]; env: Record<string, string> }> = {
    api: { entry: 'src/entry/node.ts', args: [], env: { ROLES: 'api', PORT: String(apiPort) } },
    relay: { entry: 'src/entry/relay.ts', args: [], env: o.broken === 'mark-before-puback' ? { HONO_OUTBOX_TEST_FAULT: 'mark-before-puback' } : {} },
    // the broken subscriber also dies once between commit and ack, so a redelivery is certain
    reporting: { entry: 'src/entry/consume.ts', args: ['reporting'], env: o.broken === 'no-inbox' ? { HONO_OUTBOX_TEST_FAULT: `no-inbox,kill-after-commit:10:${join(dir, 'reporting.crashed')}` } : {} },
    notifications: { entry: 'src/entry/consume.ts', args: ['notifications'], env: o.broken === 'no-inbox' ? { HONO_OUTBOX_TEST_FAULT: `no-inbox,kill-after-commit:10:${join(dir, 'notifications.crashed')}` } : {} },
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

    // restart anything down, then wait (bounded) until the outbox is drained and the subscribers caught up
    for (const name of Object.keys(commands) as ProcessName[]) {
      const p = procs.get(name);
      if (!alive(name)) start(name);
      else p!.proc.kill('SIGCONT');
    }
    log(`torture: load done (${ledger.length} requests), draining`);
    await waitFor(() => drained(env.DATABASE_URL!, nats.url), 180_000, 'drain');
    clearInterval(watchdog);

    for (const p of procs.values()) await p.stop('SIGTERM', 15_000).catch(() => p.kill9());
    const report = await checkRun({
      apiDbUrl: env.DATABASE_URL!,
      subscriberDbUrls: { reporting: `file:${join(dir, 'reporting.db')}`, notifications: `file:${join(dir, 'notifications.db')}` },
      natsUrl: nats.url,
      stream: 'EVENTS',
      ledger,
    });
    writeFileSync(join(dir, 'ledger.json'), JSON.stringify(ledger));
    return { ...report, seed: o.seed, injected, schedule, ledger: ledger.length, seconds: Math.round((performance.now() - began) / 1000), dir };
  } finally {
    for (const p of procs.values()) await p.kill9();
    await nats[Symbol.asyncDispose]();
    if (!o.keep) rmSync(dir, { recursive: true, force: true });
  }
}

let lastDrainState = '';
async function drained(dbUrl: string, natsUrl: string): Promise<boolean> {
  const { createClient } = await import('@libsql/client');
  const c = createClient({ url: dbUrl });
  let pending: number;
  try {
    pending = Number((await c.execute("SELECT count(*) FROM outbox WHERE status = 'pending'")).rows[0]![0]);
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
