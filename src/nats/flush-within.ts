import type { NatsConnection } from '@nats-io/nats-core';
import { within } from '../worker/within.ts';

/**
 * Flushes `nc` (everything it sent has reached the broker once the broker's PONG arrives) and resolves true, or false
 * when that takes longer than `ms` or fails. `nc.flush()` alone waits as long as the broker stays silent: a frozen
 * broker is noticed only after missed pings, tens of seconds.
 */
export async function flushWithin(nc: NatsConnection, ms: number): Promise<boolean> {
  return (
    (await within(
      nc.flush().then(() => true),
      ms,
    )) ?? false
  );
}
