import type { Database } from '../db/open-database.ts';
import type { Histogram } from '../metrics/metrics.ts';
import { readOutboxStats, type OutboxStats } from '../outbox/outbox-stats.ts';
import type { RecentLogEntry, RecentLogs } from '../recent-logs.ts';
import type { BrokerState } from '../worker/broker-state.ts';
import { histogramQuantile, type Quantile } from './histogram-quantile.ts';
import type { SubscriberStatus } from './subscriber-status.ts';

/** What a process can tell about itself; the parts it does not run are left out. */
export type StatusSources = {
  service: string;
  db: Database;
  clock: () => Date;
  /** Whether the admin routes exist (ADMIN_TOKEN set): the page offers its actions only then. */
  admin: boolean;
  recentLogs: RecentLogs;
  /** With the relay role: its broker state and its `outbox_publish_lag_seconds` histogram. */
  relay?: { state(): BrokerState; lag: Histogram } | undefined;
  /** With the consumers role: its subscribers. */
  subscribers?: (() => Promise<SubscriberStatus[]>) | undefined;
};

/** Publish lag, in seconds, estimated from the histogram's buckets since the process started. */
export type LagSummary = { observed: number; p50: Quantile | null; p90: Quantile | null; p99: Quantile | null };

/** The body of GET /status.json. */
export type Status = {
  service: string;
  time: string;
  admin: boolean;
  outbox: OutboxStats;
  /** Null when this process runs no relay. */
  relay: { state: BrokerState; lag: LagSummary } | null;
  /** Null when this process runs no subscriber. */
  subscribers: SubscriberStatus[] | null;
  /** The last warnings and errors this process logged, oldest first. */
  errors: RecentLogEntry[];
};

/** Summarizes a lag histogram into p50, p90 and p99 (null before the first observation). */
export function summarizeLag(lag: Histogram): LagSummary {
  const h = lag.snapshot();
  const q = (p: number) => histogramQuantile(p, h) ?? null;
  return { observed: h.count, p50: q(0.5), p90: q(0.9), p99: q(0.99) };
}

/**
 * Reads the status: one outbox statement (readOutboxStats, O(log n) plus the backlog, never the sent rows), the
 * in-memory relay state and histogram, the subscribers' (cached) backlogs and the recent log lines.
 */
export async function readStatus(s: StatusSources): Promise<Status> {
  const now = s.clock();
  const [outbox, subscribers] = await Promise.all([readOutboxStats(s.db, now), s.subscribers?.() ?? null]);
  return {
    service: s.service,
    time: now.toISOString(),
    admin: s.admin,
    outbox,
    relay: s.relay ? { state: s.relay.state(), lag: summarizeLag(s.relay.lag) } : null,
    subscribers,
    errors: s.recentLogs.list(),
  };
}
