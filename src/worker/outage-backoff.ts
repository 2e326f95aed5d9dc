import { backoffDelay, type BackoffSettings } from './backoff.ts';
import { sleep } from './sleep.ts';

/** Consecutive failures of one thing a worker needs (the broker, a database), and the wait after each. */
export type OutageBackoff = {
  /** Failures since the last reset. */
  failures(): number;
  /** Counts one more failure and waits its delay (backoffDelay of the count, at most `maxMs`), or less when `signal` aborts. */
  backOff(signal: AbortSignal, maxMs?: number): Promise<void>;
  /** It works again: the next failure waits the base delay. */
  reset(): void;
};

/** Creates an outage back-off with no failures counted yet. */
export function createOutageBackoff(settings: BackoffSettings): OutageBackoff {
  let failures = 0;
  return {
    failures: () => failures,
    backOff: (signal, maxMs = Number.POSITIVE_INFINITY) => sleep(Math.min(backoffDelay(++failures, settings), maxMs), signal),
    reset() {
      failures = 0;
    },
  };
}
