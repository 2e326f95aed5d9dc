import { DiscardPolicy, JetStreamApiError, RetentionPolicy, StorageType, type JetStreamManager, type StreamInfo } from '@nats-io/jetstream';
import { millis, nanos } from '@nats-io/nats-core';
import type { Logger } from '../logger.ts';
import { sleep } from '../worker/sleep.ts';
import type { StreamSettings } from './stream-settings.ts';

/** The stream cannot be used as configured: a duplicate it would miss, events it would not capture, replicas it cannot have. */
export class UnsafeStreamConfigError extends Error {
  override readonly name = 'UnsafeStreamConfigError';
}

/** JSStreamReplicasNotSupportedErr: `replicas > 1 not supported in non-clustered mode`. */
const REPLICAS_NOT_SUPPORTED = 10074;
/** JSStreamNotFoundErr. */
const STREAM_NOT_FOUND = 10059;

/**
 * How long a process waits before creating again a stream it used and found gone. A broker still finishing an
 * operator's deletion can remove the store of a stream created again meanwhile (nats-server 2.9: the new stream
 * then refuses publishes, or takes them and never delivers them), so the deletion gets this long to finish.
 */
export const STREAM_RECREATE_SETTLE_MS = 2000;

/** How ensureStream treats a missing stream: `settleMs` to wait and look again before creating it (0: create at once). */
export type MissingStream = { settleMs: number; signal?: AbortSignal | undefined };

const notFound = (error: unknown) => error instanceof JetStreamApiError && error.code === STREAM_NOT_FOUND;

/**
 * Creates the stream when it is missing, with the settings docs/architecture.md explains ("JetStream settings") and
 * `s.replicas` replicas, and returns its info. With `missing.settleMs` (a caller that used the stream before), a
 * missing stream is looked up again after that wait and created only if still missing.
 * Throws UnsafeStreamConfigError when an existing stream's duplicate window is shorter than ten times the
 * relay's maximum back-off, when it does not capture `<prefix>.>`, or when replicas > 1 are asked of a server that
 * is not clustered (it never will be: a start-up refusal, not an outage).
 * An existing stream with another replica count is kept as it is, with a warning on `log`: every relay and runner
 * calls this at start and after each broker error, and one whose STREAM_REPLICAS differs (a process left on the
 * default 1, a rolling change) would otherwise rescale the stream back and forth, each time copying it to the new
 * peers or dropping replicas, often in the middle of an incident. Rescaling is the operator's step
 * (`nats stream edit <name> --replicas 3`), as are the other limits of an existing stream.
 */
export async function ensureStream(
  jsm: JetStreamManager,
  s: StreamSettings,
  log?: Pick<Logger, 'warn'>,
  missing: MissingStream = { settleMs: 0 },
): Promise<StreamInfo> {
  const requiredWindowMs = 10 * s.maxBackoffMs;
  if (s.duplicateWindowMs < requiredWindowMs) {
    throw new UnsafeStreamConfigError(
      `Refusing to start: the configured duplicate window (${s.duplicateWindowMs} ms) is shorter than 10 × the relay's maximum back-off (${requiredWindowMs} ms).`,
    );
  }
  const replicas = s.replicas ?? 1;
  let info: StreamInfo | undefined;
  try {
    info = await jsm.streams.info(s.name);
  } catch (error) {
    if (!notFound(error)) throw error;
  }
  if (!info && missing.settleMs > 0) {
    await sleep(missing.settleMs, missing.signal);
    if (missing.signal?.aborted) throw new Error(`stopped while waiting to create stream ${s.name} again`);
    info = await jsm.streams.info(s.name).catch((error: unknown) => {
      if (!notFound(error)) throw error;
      return undefined;
    });
  }
  if (!info) {
    info = await jsm.streams
      .add({
        name: s.name,
        subjects: [`${s.prefix}.>`],
        storage: StorageType.File,
        retention: RetentionPolicy.Limits,
        discard: DiscardPolicy.New,
        max_bytes: s.maxBytes,
        max_age: nanos(s.maxAgeMs),
        duplicate_window: nanos(s.duplicateWindowMs),
        max_msg_size: s.maxMsgSize,
        num_replicas: replicas,
      })
      .catch((e: unknown) => {
        if (e instanceof JetStreamApiError && e.code === REPLICAS_NOT_SUPPORTED) {
          throw new UnsafeStreamConfigError(
            `Refusing to start: STREAM_REPLICAS is ${replicas} but the NATS server is not clustered (the broker said: ${e.message}); set STREAM_REPLICAS=1 or point NATS_URL at a JetStream cluster.`,
          );
        }
        throw e;
      });
  }
  const has = info.config.num_replicas || 1;
  if (has !== replicas) {
    log?.warn('stream: kept the existing replica count, which differs from STREAM_REPLICAS; rescale it with `nats stream edit --replicas`', {
      stream: s.name,
      replicas: has,
      configured: replicas,
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
