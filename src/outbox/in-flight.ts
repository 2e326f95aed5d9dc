/** Bounds how many promises run at once without re-scanning them: one waiter is woken per settled promise. */
export type InFlight = {
  /** Resolves once fewer than `max` tracked promises are unsettled. */
  slot(): Promise<void>;
  /** Whether `max` tracked promises are unsettled (a caller that finds it false may start one without awaiting slot()). */
  full(): boolean;
  track(p: Promise<unknown>): void;
  /** Resolves once every tracked promise has settled. */
  drained(): Promise<void>;
};

export function createInFlight(max: number): InFlight {
  let count = 0;
  let waiters: Array<() => void> = [];
  const wakeAll = () => {
    const w = waiters;
    waiters = [];
    w.forEach((f) => f());
  };
  return {
    slot() {
      if (count < max) return Promise.resolve();
      return new Promise<void>((resolve) => waiters.push(resolve)).then(() => this.slot());
    },
    full: () => count >= max,
    track(p) {
      count++;
      void p
        .finally(() => {
          count--;
          wakeAll();
        })
        .catch(() => undefined);
    },
    async drained() {
      while (count > 0) await new Promise<void>((resolve) => waiters.push(resolve));
    },
  };
}
