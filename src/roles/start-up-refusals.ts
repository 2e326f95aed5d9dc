import { UnknownSubscriberError } from '../compose/define-modules.ts';
import { ConfigError } from '../config.ts';
import { DurableLayoutError } from '../inbox/partition-durables.ts';
import { UnsafeRetentionError } from '../inbox/retention.ts';
import { UnsafeConsumerConfigError } from '../nats/ensure-consumer.ts';
import { UnsafeStreamConfigError } from '../nats/ensure-stream.ts';
import { PartitionCountChangeError } from '../outbox/outbox-partitions.ts';

/**
 * The errors with which a process refuses to start: a bad configuration, a subscriber nobody composed, an inbox
 * retention below the redelivery horizon, an unsafe stream or consumer, a partition count change while rows are pending, a
 * switch of a subscriber's durables between single and partitioned that would skip or reorder events. Each message is the
 * whole story, one line for an operator; entries print it and exit 2 (a Worker answers 500 and logs it).
 */
export const START_UP_REFUSALS = [
  ConfigError,
  UnknownSubscriberError,
  UnsafeRetentionError,
  UnsafeStreamConfigError,
  UnsafeConsumerConfigError,
  PartitionCountChangeError,
  DurableLayoutError,
] as const;

/** One of START_UP_REFUSALS. */
export type StartUpRefusal = InstanceType<(typeof START_UP_REFUSALS)[number]>;

/** Whether `error` is a start-up refusal (by class, whatever its message). */
export function isStartUpRefusal(error: unknown): error is StartUpRefusal {
  return START_UP_REFUSALS.some((refusal) => error instanceof refusal);
}
