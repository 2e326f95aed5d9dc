import type { Config } from '../config.ts';
import type { StreamSettings } from '../nats/stream-settings.ts';
import type { RelayPassSettings } from './relay-pass.ts';

/** The relay's pass settings from the parsed config and the stream it publishes to. */
export function relaySettingsFrom(config: Config, stream: StreamSettings): RelayPassSettings {
  return {
    prefix: stream.prefix,
    batch: config.RELAY_BATCH,
    maxInFlight: config.RELAY_MAX_IN_FLIGHT,
    maxAttempts: config.RELAY_MAX_ATTEMPTS,
    maxMsgSize: stream.maxMsgSize,
    backoffBaseMs: config.RELAY_BACKOFF_BASE_MS,
    maxBackoffMs: config.RELAY_MAX_BACKOFF_MS,
    publishTimeoutMs: config.RELAY_PUBLISH_TIMEOUT_MS,
  };
}
