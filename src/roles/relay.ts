import type { Config } from '../config.ts';
import type { ConnectNats } from '../nats/connect.ts';
import { streamSettingsFrom } from '../nats/stream-settings.ts';
import { compactPeriodically } from '../ops/compaction.ts';
import { compactOutbox } from '../outbox/compact-outbox.ts';
import { createRelay, type Relay } from '../outbox/relay.ts';
import type { RelayFaults } from '../outbox/relay-pass.ts';
import { relaySettingsFrom } from '../outbox/relay-settings.ts';
import type { Signal } from '../signal.ts';
import type { Housekeeping, RoleDeps } from './shared.ts';

/** The relay role's parts; the process decides how long the relay runs. */
export type RelayRole = {
  relay: Relay;
  /** Deletes sent outbox rows older than OUTBOX_RETENTION. */
  housekeeping: Housekeeping[];
};

/** A relay over the service database publishing to the configured stream through `connect`, woken by `wake`, leasing partitions as `instance`. */
export function createRelayRole(
  config: Config,
  shared: RoleDeps,
  io: { connect: ConnectNats; wake: Signal; instance: string; faults?: RelayFaults | undefined },
): RelayRole {
  const { deps } = shared;
  const stream = streamSettingsFrom(config);
  const relay = createRelay({
    db: deps.db,
    writer: deps.writer,
    registry: deps.registry,
    clock: deps.clock,
    log: deps.log,
    tracer: deps.tracer,
    metrics: shared.outboxMetrics,
    connect: io.connect,
    stream,
    wake: io.wake,
    pollMs: config.RELAY_POLL_MS,
    partitions: config.OUTBOX_PARTITIONS,
    lease: { owner: io.instance, ttlMs: config.RELAY_LEASE_TTL_MS },
    settings: relaySettingsFrom(config, stream),
    ...(io.faults ? { faults: io.faults } : {}),
  });
  const compact = (signal: AbortSignal) => compactOutbox(deps, { cutoffMs: deps.clock().getTime() - config.OUTBOX_RETENTION, signal });
  return { relay, housekeeping: [(schedule, signal) => compactPeriodically('outbox', compact, { log: deps.log }, schedule, signal)] };
}
