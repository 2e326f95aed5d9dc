import { DiscardPolicy, JetStreamApiError, RetentionPolicy, StorageType, type JetStreamManager, type StreamInfo } from '@nats-io/jetstream';
import { millis, nanos } from '@nats-io/nats-core';
import type { StreamSettings } from './stream-settings.ts';

/** The existing stream would let the relay publish a duplicate the broker can no longer detect. */
export class UnsafeStreamConfigError extends Error {
  override readonly name = 'UnsafeStreamConfigError';
}

/**
 * Creates the stream when it is missing, with the settings docs/architecture.md explains ("JetStream settings"), and
 * returns its info.
 * Throws UnsafeStreamConfigError when an existing stream's duplicate window is shorter than ten times the
 * relay's maximum back-off, or when it does not capture `<prefix>.>`.
 */
export async function ensureStream(jsm: JetStreamManager, s: StreamSettings): Promise<StreamInfo> {
  const requiredWindowMs = 10 * s.maxBackoffMs;
  if (s.duplicateWindowMs < requiredWindowMs) {
    throw new UnsafeStreamConfigError(
      `Refusing to start: the configured duplicate window (${s.duplicateWindowMs} ms) is shorter than 10 × the relay's maximum back-off (${requiredWindowMs} ms).`,
    );
  }
  let info: StreamInfo;
  try {
    info = await jsm.streams.info(s.name);
  } catch (error) {
    if (!(error instanceof JetStreamApiError) || error.code !== 10059) throw error;
    info = await jsm.streams.add({
      name: s.name,
      subjects: [`${s.prefix}.>`],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.New,
      max_bytes: s.maxBytes,
      max_age: nanos(s.maxAgeMs),
      duplicate_window: nanos(s.duplicateWindowMs),
      max_msg_size: s.maxMsgSize,
    });
  }
  const windowMs = millis(info.config.duplicate_window ?? 0);
  if (windowMs < requiredWindowMs) {
    throw new UnsafeStreamConfigError(
      `Refusing to start: stream ${s.name} has a duplicate window of ${windowMs} ms, shorter than 10 × the relay's maximum back-off (${requiredWindowMs} ms); raise duplicate_window on the stream or lower RELAY_MAX_BACKOFF_MS.`,
    );
  }
  if (!info.config.subjects?.some((subj) => subj === `${s.prefix}.>` || subj === '>')) {
    throw new UnsafeStreamConfigError(
      `Refusing to start: stream ${s.name} does not capture ${s.prefix}.> (its subjects: ${info.config.subjects?.join(', ') || 'none'}).`,
    );
  }
  return info;
}
