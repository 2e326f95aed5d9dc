import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type ConsumerConfig,
  type ConsumerInfo,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { millis, nanos } from '@nats-io/nats-core';

/** What a subscriber's durable pull consumer must look like (see docs/architecture.md, "Subscribers"). */
export type ConsumerSettings = {
  stream: string;
  /** Durable name: the subscriber's name. */
  name: string;
  /** `<prefix>.<aggregate_type>.>` per aggregate type. */
  filterSubjects: string[];
  ackWaitMs: number;
  /** The broker's redelivery limit; -1 (unlimited) for inbox consumers, which dead-letter by themselves. */
  maxDeliver: number;
  /** Bound on delivered-but-unacknowledged messages; at least the runner's batch. */
  maxAckPending: number;
  /** Where a consumer created now starts (deliver policy by_start_sequence); from the stream's first message when absent. */
  startSeq?: number;
  /** Shown by `nats consumer info`; set when the consumer is created. */
  description?: string;
};

/** An existing consumer of that name cannot serve as an inbox consumer (push, or not ack-explicit). */
export class UnsafeConsumerConfigError extends Error {
  override readonly name = 'UnsafeConsumerConfigError';
}

/** The consumer config that filters on `subjects`: filter_subject for one (any broker), filter_subjects for several (2.10+). */
export const filterOf = (subjects: string[]): Partial<ConsumerConfig> =>
  subjects.length === 1 ? { filter_subject: subjects[0]! } : { filter_subjects: subjects };

const sameFilters = (cfg: ConsumerConfig, subjects: string[]) => {
  const have = cfg.filter_subjects ?? (cfg.filter_subject ? [cfg.filter_subject] : []);
  return have.length === subjects.length && [...have].sort().join(' ') === [...subjects].sort().join(' ');
};

/**
 * Creates the durable pull consumer (explicit acks, deliver all or from `startSeq`, the given filter, ack_wait and
 * max_deliver) when it is missing, or updates the settings that may change (ack_wait, max_deliver, max_ack_pending,
 * filter) when they differ, and returns its info. Safe to run from several processes at once: creating an identical
 * consumer is idempotent on the server. Throws UnsafeConsumerConfigError for a push consumer or one without explicit
 * acks. Several filter subjects need nats-server 2.10 or later.
 */
export async function ensureConsumer(jsm: JetStreamManager, s: ConsumerSettings): Promise<ConsumerInfo> {
  if (s.filterSubjects.length === 0) throw new RangeError(`consumer ${s.name} needs at least one filter subject`);
  let info: ConsumerInfo;
  try {
    info = await jsm.consumers.info(s.stream, s.name);
  } catch (error) {
    if (!(error instanceof JetStreamApiError) || error.code !== JetStreamApiCodes.ConsumerNotFound) throw error;
    return jsm.consumers
      .add(s.stream, {
        durable_name: s.name,
        ...(s.description ? { description: s.description } : {}),
        ack_policy: AckPolicy.Explicit,
        ...(s.startSeq === undefined ? { deliver_policy: DeliverPolicy.All } : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: s.startSeq }),
        ack_wait: nanos(s.ackWaitMs),
        max_deliver: s.maxDeliver,
        max_ack_pending: s.maxAckPending,
        ...filterOf(s.filterSubjects),
      })
      .catch((e: unknown) => refuseOldServer(e, s));
  }
  const cfg = info.config;
  if (cfg.deliver_subject) {
    throw new UnsafeConsumerConfigError(`Refusing to start: consumer ${s.name} on stream ${s.stream} is a push consumer; the inbox needs a pull consumer.`);
  }
  if (cfg.ack_policy !== AckPolicy.Explicit) {
    throw new UnsafeConsumerConfigError(
      `Refusing to start: consumer ${s.name} on stream ${s.stream} has ack_policy ${cfg.ack_policy}; the inbox acknowledges each message after its commit and needs ack_policy explicit.`,
    );
  }
  const upToDate =
    millis(cfg.ack_wait ?? 0) === s.ackWaitMs &&
    cfg.max_deliver === s.maxDeliver &&
    cfg.max_ack_pending === s.maxAckPending &&
    sameFilters(cfg, s.filterSubjects);
  if (upToDate) return info;
  return jsm.consumers
    .update(s.stream, s.name, {
      ack_wait: nanos(s.ackWaitMs),
      max_deliver: s.maxDeliver,
      max_ack_pending: s.maxAckPending,
      ...filterOf(s.filterSubjects),
    })
    .catch((e: unknown) => refuseOldServer(e, s));
}

/** A broker too old for several filter subjects will never accept this consumer: a start-up refusal, not an outage. */
function refuseOldServer(error: unknown, s: ConsumerSettings): never {
  const text = error instanceof JetStreamApiError ? (error.apiError().description ?? error.message) : String(error);
  if (s.filterSubjects.length > 1 && /requires server 2\.10/i.test(text)) {
    throw new UnsafeConsumerConfigError(
      `Refusing to start: subscriber consumer ${s.name} handles events of several aggregate types (${s.filterSubjects.join(', ')}), which needs nats-server 2.10 or later (the broker said: ${text}); split it into one subscriber per aggregate type or upgrade the broker.`,
    );
  }
  throw error;
}
