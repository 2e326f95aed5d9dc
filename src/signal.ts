/** A level-triggered wake-up: `notify()` makes the current or next `wait()` resolve at once. */
export type Signal = {
  notify(): void;
  /** Resolves on the next notify, after `ms`, or when `abort` fires, whichever comes first. */
  wait(ms: number, abort?: AbortSignal): Promise<void>;
};

/** Creates a Signal; a notify with nobody waiting is remembered until the next wait. */
export function createSignal(): Signal {
  let pending = false;
  let wake: (() => void) | undefined;
  return {
    notify() {
      pending = true;
      wake?.();
    },
    wait(ms, abort) {
      if (pending || abort?.aborted) {
        pending = false;
        return Promise.resolve();
      }
      return new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          abort?.removeEventListener('abort', done);
          wake = undefined;
          pending = false;
          resolve();
        };
        const timer = setTimeout(done, ms);
        abort?.addEventListener('abort', done, { once: true });
        wake = done;
      });
    },
  };
}
