// What GET /ready answers: whether this process can do its work (the service database answers, its roles run) and,
// short of that, what it cannot do well right now (the broker away, a stale relay, a held subscriber database, dead
// letters) — degraded, still ready, because the outbox keeps accepting commands through a broker outage.
import { sql } from 'drizzle-orm';
import type { Database } from '../db/open-database.ts';
import type { SubscriberLeases } from '../inbox/leased-subscriber.ts';
import type { DatabaseState } from '../inbox/write-until-committed.ts';
import type { LeaseSnapshot } from '../leases/lease-keeper.ts';
import type { Logger } from '../logger.ts';
import type { SubscriberStatus } from '../ops/subscriber-status.ts';
import type { BrokerState } from '../worker/broker-state.ts';
import { within } from '../worker/within.ts';

/** How long /ready waits for the service database's `SELECT 1`, and for the subscribers' (cached) backlog. */
export const READINESS_TIMEOUT_MS = 1000;

/** `unavailable` (503): this process cannot do its work; `degraded` (200): it can, with the reasons listed. */
export type ReadinessStatus = 'ready' | 'degraded' | 'unavailable';

/** The relay of this process, as /ready sees it. */
export type RelayReadiness = {
  state(): BrokerState;
  /** When its last pass ended without a broker or database error; undefined before the first. */
  lastSuccessfulPassAt(): Date | undefined;
  /** False once its run ended (stopped, a bounded run done, or failed): it publishes nothing more. */
  running(): boolean;
  /** The outbox partitions it leases now; undefined while it does not run. */
  leases?(): LeaseSnapshot | undefined;
};

/** One subscriber of this process, as /ready sees it; `leases` says its mode and the partitions this instance holds. */
export type SubscriberReadiness = { name: string; state(): BrokerState; databaseState(): DatabaseState; running(): boolean; leases?(): SubscriberLeases };

/** The roles this process runs and their parts /ready asks; the parts it does not run are left out. */
export type ReadinessSources = {
  /** The roles this process runs (`api`, `relay`, `consumers`); the service database is required by api and relay. */
  roles: readonly string[];
  relay?: RelayReadiness | undefined;
  /** Without a successful relay pass for this long (counted from start before the first), the process is degraded. */
  relayStaleAfterMs?: number | undefined;
  subscribers?: { runners: readonly SubscriberReadiness[]; backlog(): Promise<SubscriberStatus[]> } | undefined;
};

/** The body of GET /ready. */
export type ReadinessReport = {
  status: ReadinessStatus;
  /** Why the status is not `ready`, one line each; empty when ready. */
  reasons: string[];
  roles: string[];
  database: 'ok' | 'unavailable';
  relay?: { running: boolean; broker: BrokerState; lastSuccessfulPassAt: string | null };
  subscribers?: Array<{
    name: string;
    running: boolean;
    broker: BrokerState;
    database: DatabaseState;
    /** The durable consumer's num_pending (its lag) and num_ack_pending; null while the broker cannot tell. */
    pending: number | null;
    ackPending: number | null;
    deadLetters: number | null;
  }>;
  /**
   * What this instance leases: the relay's outbox partitions (while it runs) and, per subscriber, its mode and the
   * partitions it holds (`standby` when it runs none of them: ready all the same).
   */
  leases?: {
    relay?: LeaseSnapshot;
    subscribers?: Array<{ name: string } & SubscriberLeases>;
  };
};

/** Without a relay pass for this long a relay is stale, however its settings allow it to wait: a minute at least. */
export const relayStaleAfterMs = (o: { pollMs: number; maxBackoffMs: number }): number => Math.max(60_000, 3 * o.pollMs, 2 * o.maxBackoffMs);

/**
 * A readiness check over the service database and `sources`, timed from now. `unavailable` only when something this
 * process must do cannot happen: the service database does not answer in `timeoutMs` (with the api or relay role),
 * or a role stopped for good. `degraded` when a broker is unavailable, the relay made no successful pass for longer
 * than `relayStaleAfterMs`, a subscriber's database is unavailable, or dead letters exist (or the database does not
 * answer a process of subscribers only). Else `ready`: a subscriber standing by (another instance holds its leases)
 * is ready. The report lists the partitions this instance leases (`leases`).
 */
export function createReadinessCheck(
  deps: { db: Database; clock: () => Date; log: Logger },
  sources: ReadinessSources,
  timeoutMs = READINESS_TIMEOUT_MS,
): () => Promise<ReadinessReport> {
  const startedAt = deps.clock().getTime();
  const databaseRequired = sources.roles.some((r) => r === 'api' || r === 'relay') || sources.roles.length === 0;
  const staleAfterMs = sources.relayStaleAfterMs ?? relayStaleAfterMs({ pollMs: 100, maxBackoffMs: 30_000 });

  const databaseAnswers = async (): Promise<boolean> => {
    // drizzle runs a query at each `then`: one real promise, raced against the timeout
    const select = (async () => void (await deps.db.run(sql`SELECT 1`)))().then(
      () => true,
      (error: unknown) => {
        deps.log.warn('readiness check failed', { error });
        return false;
      },
    );
    const answered = await within(select, timeoutMs);
    if (answered === undefined) deps.log.warn('readiness check failed', { error: `the database did not answer within ${timeoutMs} ms` });
    return answered === true;
  };
  const backlogs = async (): Promise<Map<string, SubscriberStatus>> => {
    if (!sources.subscribers) return new Map();
    const read = await within(sources.subscribers.backlog(), timeoutMs);
    return new Map((read ?? []).map((s): [string, SubscriberStatus] => [s.name, s]));
  };

  return async () => {
    const [databaseOk, backlog] = await Promise.all([databaseAnswers(), backlogs()]);
    const now = deps.clock().getTime();
    const unavailable: string[] = [];
    const degraded: string[] = [];
    if (!databaseOk) (databaseRequired ? unavailable : degraded).push('database: the service database does not answer');
    const report: ReadinessReport = { status: 'ready', reasons: [], roles: [...sources.roles], database: databaseOk ? 'ok' : 'unavailable' };

    const relay = sources.relay;
    if (relay) {
      const running = relay.running();
      const broker = relay.state();
      const lastPass = relay.lastSuccessfulPassAt();
      report.relay = { running, broker, lastSuccessfulPassAt: lastPass?.toISOString() ?? null };
      const leases = relay.leases?.();
      if (leases) (report.leases ??= {}).relay = leases;
      const since = lastPass?.getTime() ?? startedAt;
      if (!running) unavailable.push('relay: stopped');
      else if (broker === 'unavailable') degraded.push('relay: the broker is unavailable; commands are kept in the outbox');
      else if (now - since > staleAfterMs) degraded.push(`relay: no successful pass for ${Math.round((now - since) / 1000)} s`);
    }

    for (const s of sources.subscribers?.runners ?? []) {
      const counts = backlog.get(s.name);
      const entry = {
        name: s.name,
        running: s.running(),
        broker: s.state(),
        database: s.databaseState(),
        pending: counts?.pending ?? null,
        ackPending: counts?.ackPending ?? null,
        deadLetters: counts?.deadLetters ?? null,
      };
      (report.subscribers ??= []).push(entry);
      if (s.leases) ((report.leases ??= {}).subscribers ??= []).push({ name: s.name, ...s.leases() });
      const who = `subscriber ${s.name}`;
      if (!entry.running) unavailable.push(`${who}: stopped`);
      else {
        if (entry.broker === 'unavailable') degraded.push(`${who}: the broker is unavailable`);
        if (entry.database === 'unavailable') degraded.push(`${who}: its database refuses writes; messages are held until it recovers`);
      }
      if (entry.deadLetters) {
        const n = `${entry.deadLetters}${counts?.deadLettersCapped ? '+' : ''}`;
        degraded.push(`${who}: ${n} dead letter${n === '1' ? '' : 's'}`);
      }
    }

    report.reasons = [...unavailable, ...degraded];
    report.status = unavailable.length > 0 ? 'unavailable' : degraded.length > 0 ? 'degraded' : 'ready';
    return report;
  };
}
