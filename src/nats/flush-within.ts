import type { NatsConnection } from '@nats-io/nats-core';

/**
 * Flushes `nc` (everything it sent has reached the broker once the broker's PONG arrives) and resolves true, or false
 * when that takes longer than `ms` or fails. `nc.flush()` alone waits as long as the broker stays silent: a frozen
 * broker is noticed only after missed pings, tens of seconds.
 */
export async function flushWithin(nc: NatsConnection, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([
      nc.flush().then(
        () => true,
        () => false,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
