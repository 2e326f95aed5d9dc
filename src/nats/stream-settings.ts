import type { Config } from '../config.ts';

/** What the relay and the consumers agree on about the stream (docs/architecture.md, "JetStream settings"). */
export type StreamSettings = {
  name: string;
  prefix: string;
  maxBytes: number;
  maxAgeMs: number;
  duplicateWindowMs: number;
  maxMsgSize: number;
  /** The relay's maximum back-off; the duplicate window must cover ten of them. */
  maxBackoffMs: number;
  /** Replicas the stream is created with (STREAM_REPLICAS: 3 on a three-node cluster); 1 when absent. */
  replicas?: number;
};

export const MAX_MSG_SIZE = 256 * 1024;
export const MAX_AGE_MS = 7 * 24 * 3600 * 1000;

/** Derives stream settings from the parsed config. */
export function streamSettingsFrom(config: Config): StreamSettings {
  return {
    name: config.NATS_STREAM,
    prefix: config.EVENTS_SUBJECT_PREFIX,
    maxBytes: config.STREAM_MAX_BYTES,
    maxAgeMs: MAX_AGE_MS,
    duplicateWindowMs: config.STREAM_DUPLICATE_WINDOW_MS,
    maxMsgSize: MAX_MSG_SIZE,
    maxBackoffMs: config.RELAY_MAX_BACKOFF_MS,
    replicas: config.STREAM_REPLICAS,
  };
}

/**
 * Subject of an event: `<prefix>.<aggregate_type>.<aggregate_id>.<partition>`. The trailing partition token lets a
 * subscriber run one consumer per partition (`<prefix>.<aggregate_type>.*.<partition>`), on any nats-server.
 */
export const eventSubject = (prefix: string, aggregateType: string, aggregateId: string, partition: number) =>
  `${prefix}.${aggregateType}.${aggregateId}.${partition}`;

/** Core-NATS subject that wakes relays of `stream` in other processes; outside the stream's subjects. */
export const kickSubject = (stream: string) => `_OUTBOX.kick.${stream}`;
