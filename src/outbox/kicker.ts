import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../logger.ts';
import type { ConnectNats } from '../nats/connect.ts';
import { backoffDelay } from '../worker/backoff.ts';

/** Wakes relays in other processes after a commit: best effort, one core-NATS message per burst of commits. */
export type Kicker = { kick(): void; close(): Promise<void> };

/** Connects in the background (retrying with back-off) and publishes an empty message on `subject` per kick. */
export function createKicker(deps: { connect: ConnectNats; subject: string; log: Logger; maxBackoffMs: number }): Kicker {
  let nc: NatsConnection | undefined;
  let closed = false;
  let queued = false;
  let attempt = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;

  const open = async () => {
    if (closed) return;
    try {
      nc = await deps.connect();
      attempt = 0;
      void nc.closed().then(() => {
        nc = undefined;
        if (!closed) schedule();
      });
    } catch (error) {
      deps.log.debug('kicker: broker unreachable', { error: String(error) });
      schedule();
    }
  };
  const schedule = () => {
    timer = setTimeout(() => void open(), backoffDelay(++attempt, { baseMs: 1000, maxMs: deps.maxBackoffMs }));
  };
  void open();

  return {
    kick() {
      if (queued || !nc) return;
      queued = true;
      queueMicrotask(() => {
        queued = false;
        try {
          nc?.publish(deps.subject);
        } catch {
          // best effort: the relay's poll is the safety net
        }
      });
    },
    async close() {
      closed = true;
      clearTimeout(timer);
      await nc?.close().catch(() => undefined);
    },
  };
}
