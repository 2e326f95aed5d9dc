// Each subscriber's backlog for the status page and /metrics: what its durable consumer still has to deliver (one
// JetStream API request per subscriber) and how many dead letters it keeps (a bounded count), read at most once per
// few seconds.
import { jetstreamManager, JetStreamApiError, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Database } from '../db/open-database.ts';
import type { DatabaseState } from '../inbox/write-until-committed.ts';
import type { Metrics } from '../metrics/metrics.ts';
import type { ConnectNats } from '../nats/connect.ts';
import type { BrokerState } from '../worker/broker-state.ts';
import { cacheFor } from './cache-for.ts';
import { within } from '../worker/within.ts';

/** Dead letters are counted up to this many; past it the page says "1000+". */
export const DEAD_LETTER_COUNT_CAP = 1000;

/** One subscriber as the status page shows it; `pending`/`ackPending` are null while the broker cannot tell. */
export type SubscriberStatus = {
  name: string;
  /** Its durable consumer on the stream. */
  durable: string;
  broker: BrokerState;
  database: DatabaseState;
  /** Messages of its filter the broker has not delivered yet (the consumer's num_pending). */
  pending: number | null;
  /** Messages delivered and not yet acknowledged (num_ack_pending). */
  ackPending: number | null;
  /** Its dead letters, counted up to DEAD_LETTER_COUNT_CAP (then `deadLettersCapped`); null if the count failed. */
  deadLetters: number | null;
  deadLettersCapped: boolean;
  /** Why `pending` or `deadLetters` is missing. */
  error?: string;
};

/**
 * A subscriber this process runs: its names, its own database, and its runners' live states. `durable` names its
 * durable consumer; a partitioned subscriber lists its partitions' durables in `durables`, whose backlogs add up.
 */
export type WatchedSubscriber = {
  name: string;
  durable: string;
  durables?: readonly string[];
  db: Database;
  state(): BrokerState;
  databaseState(): DatabaseState;
};

export type SubscriberStatusReader = {
  /** Every watched subscriber; broker and database states are live, the counts at most `ttlMs` old. */
  read(): Promise<SubscriberStatus[]>;
  /** Closes the connection the reader opened, if any. */
  close(): Promise<void>;
};

const COUNT_DEAD_LETTERS_SQL = `SELECT count(*) AS n FROM (SELECT 1 FROM dead_letters WHERE consumer = ? LIMIT ${DEAD_LETTER_COUNT_CAP + 1})`;

const message = (error: unknown) => (error instanceof Error ? error.message : String(error));

/**
 * Reads the subscribers' backlogs through a connection of its own, opened at the first read and kept; a read waits
 * at most `timeoutMs` (default 2000) for the broker, and at most one read runs per `ttlMs` (default 3000), however
 * many pages poll.
 */
export function createSubscriberStatus(o: {
  connect: ConnectNats;
  stream: string;
  subscribers: readonly WatchedSubscriber[];
  ttlMs?: number;
  timeoutMs?: number;
}): SubscriberStatusReader {
  const timeoutMs = o.timeoutMs ?? 2000;
  let conn: NatsConnection | undefined;
  let manager: Promise<JetStreamManager> | undefined;
  let closed = false;

  const forget = () => {
    manager = undefined;
    void conn?.close().catch(() => undefined);
    conn = undefined;
  };
  const open = async (): Promise<JetStreamManager> => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const connecting = o.connect();
    const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('the broker did not answer in time')), timeoutMs)));
    try {
      conn = await Promise.race([connecting, timeout]);
    } catch (error) {
      // a connection that arrives after the timeout is closed at once
      void connecting.then((late) => late.close()).catch(() => undefined);
      throw error;
    } finally {
      clearTimeout(timer);
    }
    if (closed) {
      forget();
      throw new Error('closed');
    }
    return jetstreamManager(conn, { timeout: timeoutMs, checkAPI: false });
  };

  const backlog = async (jsm: JetStreamManager, s: WatchedSubscriber) => {
    const infos = await Promise.all((s.durables ?? [s.durable]).map((d) => jsm.consumers.info(o.stream, d)));
    return { pending: infos.reduce((n, i) => n + i.num_pending, 0), ackPending: infos.reduce((n, i) => n + i.num_ack_pending, 0) };
  };
  const deadLetters = async (s: WatchedSubscriber) => Number((await s.db.$client.execute({ sql: COUNT_DEAD_LETTERS_SQL, args: [s.name] })).rows[0]!.n);

  const counts = cacheFor(o.ttlMs ?? 3000, async () => {
    let jsm: JetStreamManager | undefined;
    let brokerError: string | undefined;
    try {
      jsm = await (manager ??= open());
    } catch (error) {
      forget();
      brokerError = message(error);
    }
    return Promise.all(
      o.subscribers.map(async (s) => {
        const [b, d] = await Promise.allSettled([jsm ? backlog(jsm, s) : Promise.reject(new Error(brokerError)), deadLetters(s)]);
        // an API error (no such consumer yet) says nothing about the connection; anything else may be a dead one
        if (b.status === 'rejected' && jsm && !(b.reason instanceof JetStreamApiError)) forget();
        const errors = [b, d].flatMap((r) => (r.status === 'rejected' ? [message(r.reason)] : []));
        const dead = d.status === 'fulfilled' ? d.value : null;
        return {
          name: s.name,
          pending: b.status === 'fulfilled' ? b.value.pending : null,
          ackPending: b.status === 'fulfilled' ? b.value.ackPending : null,
          deadLetters: dead === null ? null : Math.min(dead, DEAD_LETTER_COUNT_CAP),
          deadLettersCapped: dead !== null && dead > DEAD_LETTER_COUNT_CAP,
          ...(errors.length > 0 ? { error: errors.join('; ') } : {}),
        };
      }),
    );
  });

  return {
    async read() {
      const latest = await counts();
      return o.subscribers.map((s, i) => ({ ...latest[i]!, name: s.name, durable: s.durable, broker: s.state(), database: s.databaseState() }));
    },
    async close() {
      closed = true;
      const c = conn;
      manager = undefined;
      conn = undefined;
      await c?.close().catch(() => undefined);
    },
  };
}

/**
 * Registers inbox_consumer_pending_messages, inbox_consumer_ack_pending_messages and inbox_dead_letter_messages
 * {consumer}, set before each scrape from `status` (so from counts at most its ttl old). A scrape waits at most
 * `waitMs` (default 1000) for them; a count the broker or the database cannot give by then is left out of that
 * scrape rather than shown stale or as 0 (the read goes on, and a later scrape shows its result). Dead letters are
 * counted up to DEAD_LETTER_COUNT_CAP.
 */
export function registerSubscriberGauges(metrics: Metrics, status: Pick<SubscriberStatusReader, 'read'>, options: { waitMs?: number } = {}): void {
  const gauges = {
    pending: metrics.gauge('inbox_consumer_pending_messages', "Messages of a subscriber's filter its durable consumer has not delivered yet (num_pending)."),
    ackPending: metrics.gauge('inbox_consumer_ack_pending_messages', 'Messages delivered to a subscriber and not acknowledged yet (num_ack_pending).'),
    deadLetters: metrics.gauge('inbox_dead_letter_messages', `Dead letters a subscriber keeps, counted up to ${DEAD_LETTER_COUNT_CAP}.`),
  };
  const shown = new Set<string>();
  metrics.beforeRender(async () => {
    const read = await within(status.read(), options.waitMs ?? 1000);
    const fresh = new Map((read ?? []).map((s) => [s.name, s]));
    for (const consumer of new Set([...shown, ...fresh.keys()])) {
      const s = fresh.get(consumer);
      const labels = { consumer };
      for (const key of ['pending', 'ackPending', 'deadLetters'] as const) {
        const value = s?.[key];
        if (value === null || value === undefined) gauges[key].delete(labels);
        else gauges[key].set(value, labels);
      }
      if (s) shown.add(consumer);
    }
  });
}
