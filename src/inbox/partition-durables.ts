import {
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type ConsumerInfo,
  type JetStreamManager,
  type MsgRequest,
  type StoredMsg,
} from '@nats-io/jetstream';
import type { Logger } from '../logger.ts';
import { ensureConsumer, type ConsumerSettings } from '../nats/ensure-consumer.ts';
import { ensureStream } from '../nats/ensure-stream.ts';
import type { StreamSettings } from '../nats/stream-settings.ts';
import type { SubscriberMode } from './subscriber-mode.ts';

/** The durable consumer of partition `partition` of a subscriber whose single durable is `base`: `<base>-p<partition>`. */
export const partitionDurableName = (base: string, partition: number) => `${base}-p${partition}`;

/** The filter of a partition's durable: `<prefix>.<aggregate_type>.*.<partition>` for each aggregate type the subscriber handles. */
export const partitionFilters = (prefix: string, aggregateTypes: readonly string[], partition: number) =>
  aggregateTypes.map((t) => `${prefix}.${t}.*.${partition}`);

/** The durables a subscriber in `mode` consumes through: `<base>`, or `<base>-p0` … `<base>-p<n-1>`. */
export const durablesOf = (base: string, mode: SubscriberMode): string[] =>
  mode.partitioned ? Array.from({ length: mode.partitions }, (_, k) => partitionDurableName(base, k)) : [base];

/** The switch between two layouts of a subscriber's durables cannot keep its guarantees: the process refuses to go on. */
export class DurableLayoutError extends Error {
  override readonly name = 'DurableLayoutError';
}

/** What prepareDurables needs to know about one subscriber. */
export type DurablePlan = {
  stream: StreamSettings;
  subscriber: string;
  /** Its single durable's name, `<service>-<subscriber>`; partition durables add `-p<k>`. */
  base: string;
  mode: SubscriberMode;
  aggregateTypes: readonly string[];
  /** The settings of a durable it creates (as its runner would ensure them). */
  settings(name: string, filterSubjects: string[]): ConsumerSettings;
  /** INBOX_RETENTION_DAYS in ms: a replay must not reach events whose inbox rows may be compacted. */
  retentionMs: number;
  log: Logger;
  now?: () => number;
};

const partitionOfName = (base: string, name: string): number | undefined => {
  if (!name.startsWith(`${base}-p`)) return undefined;
  const k = name.slice(base.length + 2);
  return /^(0|[1-9]\d{0,5})$/.test(k) ? Number(k) : undefined;
};
const countOf = (info: ConsumerInfo): number | undefined => {
  const m = /outbox partition \d+ of (\d+)$/.exec(info.config.description ?? '');
  return m ? Number(m[1]) : undefined;
};
const notFound = (error: unknown) =>
  error instanceof JetStreamApiError && (error.code === JetStreamApiCodes.StreamNotFound || error.code === JetStreamApiCodes.ConsumerNotFound);

/**
 * Readies a subscriber's durables for `plan.mode` before any of its runners starts; true when they may start, false
 * to ask again a little later. Only the holder of partition 0 changes anything (`holdsFirst`, asked again before each
 * change, so an instance that lost partition 0 half-way leaves the rest to the new holder); the others wait for it.
 *
 * Durables of the other layout (the single `<base>` in partitioned mode, `<base>-p<k>` in single mode, or partition
 * durables made for another partition count) hold the subscriber's position. The holder hands it over: the new
 * layout's durables are (re)created starting right after the old ones' acknowledged floor — the lowest over them;
 * a durable with nothing pending or unacknowledged covers the whole stream — and only then are the old ones deleted
 * (a crash in between redoes it, the old ones have not moved). A durable covers only its filter, though: partition
 * durables made for a count c never saw the tokens c..n-1 of a larger count n (the relays publish on them once
 * restarted with n, before the subscriber is), so on a raise the new durables start no later than the earliest
 * message on those tokens since the old durables' start (firstUnseen). A lowering (n < c) needs no such search: each
 * new durable's token was an old durable's, and the tokens n..c-1 the new layout drops were the old durables' too,
 * acknowledged (they are quiet) and no longer published by relays running with n. Nothing unapplied is skipped: what the old durables
 * left unacknowledged lies above their floor. What is replayed (acknowledged above the floor) is already in the inbox
 * and comes back `duplicate`; and per aggregate the applied events are a prefix of its events in stream order, so the
 * new durables apply the rest in order. It waits (false) while a pull request is open on an old durable: an instance
 * outside the lease protocol (an older version) still consumes it, or one stopped less than a pull request ago.
 *
 * It refuses (DurableLayoutError) what would break those guarantees: partitioned durables that would miss events
 * published on subjects without a partition token (before partitions existed) that the old layout had not consumed
 * yet; a change of the partition count while the old partition durables still have messages to deliver (an
 * aggregate's earlier events would sit in another partition than its later ones); and a replay reaching events
 * older than the inbox retention (their inbox rows may be compacted: they would be applied again). A subscriber
 * partitioned from its start has no old durables: its durables are all created at once, from the stream's first
 * message, unless that would skip events without a partition token.
 */
export async function prepareDurables(jsm: JetStreamManager, plan: DurablePlan, holdsFirst: () => boolean): Promise<boolean> {
  const { stream, base, mode, log } = plan;
  // as the runners ensure it (they would create it): the durables made here need it
  const info = await ensureStream(jsm, stream);
  const lastSeq = info.state.last_seq;
  const firstSeq = info.state.first_seq;
  const wanted = durablesOf(base, mode);
  const mine: ConsumerInfo[] = [];
  for await (const listed of await jsm.consumers.list(stream.name)) {
    // nats-server before 2.10 lists a consumer deleted while it answers (a runner's short-lived ephemeral one) as null
    const c = listed as ConsumerInfo | null;
    if (c && (c.name === base || partitionOfName(base, c.name) !== undefined)) mine.push(c);
  }
  const otherLayout = (c: ConsumerInfo) => {
    if (!wanted.includes(c.name)) return true;
    const count = countOf(c);
    return mode.partitioned && count !== undefined && count !== mode.partitions;
  };
  const old = mine.filter(otherLayout);

  if (old.length === 0) {
    const missing = wanted.filter((name) => !mine.some((c) => c.name === name));
    // a single durable is created by its runner, as it always was
    if (!mode.partitioned || missing.length === 0) return true;
    if (!holdsFirst()) return false;
    if (missing.length === wanted.length) await refuseUnpartitioned(jsm, plan, firstSeq, 'the stream holds events');
    for (const name of missing) {
      if (!holdsFirst()) return false;
      await create(jsm, plan, name, undefined);
    }
    log.info('subscriber: partition durables created', { subscriber: plan.subscriber, durables: missing.length });
    return true;
  }
  if (!holdsFirst()) return false;
  const pulled = old.filter((c) => c.num_waiting > 0);
  if (pulled.length > 0) {
    log.warn('subscriber: an old durable is still being pulled from; handing its position over once nobody does', {
      subscriber: plan.subscriber,
      durables: pulled.map((c) => c.name),
    });
    return false;
  }
  const oldPartitions = old.filter((c) => c.name !== base);
  if (mode.partitioned && oldPartitions.length > 0) {
    const busy = oldPartitions.filter((c) => c.num_pending > 0 || c.num_ack_pending > 0);
    if (busy.length > 0)
      throw new DurableLayoutError(
        `Refusing to start: subscriber ${plan.subscriber} has partition durables made for another partition count (${oldPartitions.map((c) => c.name).join(', ')}) that still have ${busy.reduce((n, c) => n + c.num_pending + c.num_ack_pending, 0)} messages to deliver; an aggregate's earlier events would be applied after its later ones. Run it with its previous OUTBOX_PARTITIONS until they are drained (stop the writers, let the relays and subscribers catch up), or switch it to CONSUMER_PARTITIONED=false, which keeps the order across any partition count.`,
      );
  }
  // Quiet durables (nothing pending, nothing unacknowledged) cover the stream as it was before they were read.
  const covered = old.map((c) => (c.num_pending === 0 && c.num_ack_pending === 0 ? Math.max(c.ack_floor.stream_seq, lastSeq) : c.ack_floor.stream_seq));
  // ... but only on the subjects they filtered: partition tokens above their count they never saw.
  const unseen = mode.partitioned ? await firstUnseen(jsm, plan, old, firstSeq) : undefined;
  const start = Math.min(...covered, ...(unseen === undefined ? [] : [unseen - 1])) + 1;
  await refuseStaleReplay(jsm, plan, start);
  if (mode.partitioned) await refuseUnpartitioned(jsm, plan, start, `the old durables (${old.map((c) => c.name).join(', ')}) have not consumed events`);
  for (const name of wanted) {
    if (!holdsFirst()) return false;
    if (mine.some((c) => c.name === name)) await jsm.consumers.delete(stream.name, name).catch((e: unknown) => (notFound(e) ? true : Promise.reject(e)));
    await create(jsm, plan, name, start);
  }
  for (const c of old) {
    if (!holdsFirst()) return false;
    if (!wanted.includes(c.name)) await jsm.consumers.delete(stream.name, c.name).catch((e: unknown) => (notFound(e) ? true : Promise.reject(e)));
  }
  log.info('subscriber: durables handed over to the new layout', {
    subscriber: plan.subscriber,
    from: old.map((c) => c.name),
    to: mode.partitioned ? `${wanted.length} partition durables` : base,
    startSeq: start,
  });
  return true;
}

/**
 * The stream sequence of the earliest message on a partition token below `plan.mode`'s count that none of the `old`
 * partition durables filtered (tokens c..n-1 when they were made for c < n), at or after the old durables' start
 * (what came before it was the layout before theirs); undefined when there is none, or when the old layout
 * includes the single durable, which saw every subject.
 */
async function firstUnseen(jsm: JetStreamManager, plan: DurablePlan, old: ConsumerInfo[], firstSeq: number): Promise<number | undefined> {
  if (!plan.mode.partitioned || old.some((c) => c.name === plan.base)) return undefined;
  const counts = old.map((c) => countOf(c) ?? partitionOfName(plan.base, c.name)! + 1);
  const seen = Math.min(...counts);
  if (seen >= plan.mode.partitions) return undefined;
  const from = Math.max(firstSeq, Math.min(...old.map((c) => startOf(c) ?? firstSeq)));
  let earliest: number | undefined;
  for (const t of plan.aggregateTypes)
    for (let k = seen; k < plan.mode.partitions; k++) {
      const m = await nextMessage(jsm, plan.stream.name, `${plan.stream.prefix}.${t}.*.${k}`, from);
      if (m && (earliest === undefined || m.seq < earliest)) earliest = m.seq;
    }
  return earliest;
}

/** The stream sequence a durable was created to start at, or undefined when it started at the stream's first message. */
const startOf = (c: ConsumerInfo): number | undefined =>
  c.config.deliver_policy === DeliverPolicy.StartSequence && c.config.opt_start_seq ? c.config.opt_start_seq : undefined;

async function create(jsm: JetStreamManager, plan: DurablePlan, name: string, startSeq: number | undefined): Promise<void> {
  const k = plan.mode.partitioned ? partitionOfName(plan.base, name) : undefined;
  const filters =
    k === undefined ? plan.aggregateTypes.map((t) => `${plan.stream.prefix}.${t}.>`) : partitionFilters(plan.stream.prefix, plan.aggregateTypes, k);
  await ensureConsumer(jsm, {
    ...plan.settings(name, filters),
    ...(startSeq === undefined ? {} : { startSeq }),
    // the partition count it was made for: a later change of the count is recognised by it
    ...(k !== undefined && plan.mode.partitioned ? { description: `subscriber ${plan.subscriber}: outbox partition ${k} of ${plan.mode.partitions}` } : {}),
  });
}

/** Partition durables only see `<prefix>.<type>.<id>.<partition>`: refuses when an event without the partition token lies at or after `from`. */
async function refuseUnpartitioned(jsm: JetStreamManager, plan: DurablePlan, from: number, what: string): Promise<void> {
  for (const t of plan.aggregateTypes) {
    const legacy = await nextMessage(jsm, plan.stream.name, `${plan.stream.prefix}.${t}.*`, from);
    if (legacy)
      throw new DurableLayoutError(
        `Refusing to start: subscriber ${plan.subscriber} cannot run partitioned yet: ${what} published before outbox partitions existed (${legacy.subject}, stream sequence ${legacy.seq}), which partition durables would never receive. Run it with CONSUMER_PARTITIONED=false until it has applied them (they leave the stream after its max age), then switch.`,
      );
  }
}

/** A replay from `start` must stay inside the inbox retention, or events applied long ago would be applied again. */
async function refuseStaleReplay(jsm: JetStreamManager, plan: DurablePlan, start: number): Promise<void> {
  const now = plan.now?.() ?? Date.now();
  for (const t of plan.aggregateTypes) {
    const first = await nextMessage(jsm, plan.stream.name, `${plan.stream.prefix}.${t}.>`, start);
    // an hour of margin: the replay reaches it some time after this check
    if (first && now - first.time.getTime() > plan.retentionMs - 3_600_000)
      throw new DurableLayoutError(
        `Refusing to start: handing subscriber ${plan.subscriber} over to ${plan.mode.partitioned ? 'partition durables' : 'its single durable'} would replay events from stream sequence ${start}, published ${first.time.toISOString()}, older than the inbox retention (INBOX_RETENTION_DAYS): they could be applied a second time. Switch back, let the old durables catch up, then switch.`,
      );
  }
}

/** The first message of `stream` at or after sequence `from` on `subject` (a wildcard), or null (STREAM.MSG.GET, nats-server 2.9+). */
async function nextMessage(jsm: JetStreamManager, stream: string, subject: string, from: number): Promise<StoredMsg | null> {
  // the server takes next_by_subj with seq on the plain get too; the client types it for direct gets only
  const query = { seq: from, next_by_subj: subject } as unknown as MsgRequest;
  return jsm.streams.getMessage(stream, query).catch((e: unknown) => {
    if (notFound(e) || (e instanceof JetStreamApiError && e.code === JetStreamApiCodes.NoMessageFound)) return null;
    throw e;
  });
}
