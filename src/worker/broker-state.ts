import type { Logger } from '../logger.ts';

/** A worker's view of the broker, reported by /ready. */
export type BrokerState = 'connecting' | 'connected' | 'unavailable';

/** Holds a worker's broker state; only changes are logged. */
export type BrokerStateTracker = {
  state(): BrokerState;
  /** Records `next`; logs it when it differs from the current state (`error`: why the broker is unavailable). */
  set(next: BrokerState, error?: unknown): void;
};

/** The log lines of a worker's broker-state changes. */
export type BrokerStateLog = {
  log: Logger;
  /** Logged at warn, with `fields` and the error, when the broker becomes unavailable. */
  unavailable: string;
  /** Logged at info, with `fields`, when the broker is reached (again). */
  connected: string;
  fields?: Record<string, unknown>;
  /** How the error is written (default String). */
  describe?: (error: unknown) => string;
};

/** Creates a tracker starting at 'connecting'; each change to 'unavailable' or 'connected' is logged once. */
export function createBrokerState(l: BrokerStateLog): BrokerStateTracker {
  let current: BrokerState = 'connecting';
  const describe = l.describe ?? String;
  return {
    state: () => current,
    set(next, error) {
      if (next === current) return;
      current = next;
      if (next === 'unavailable') l.log.warn(l.unavailable, { ...l.fields, error: describe(error) });
      else if (next === 'connected') l.log.info(l.connected, l.fields);
    },
  };
}
