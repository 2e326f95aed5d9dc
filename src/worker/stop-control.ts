/** How a caller bounds a worker's run. */
export type StopOptions = {
  /** The run stops when it aborts (SIGTERM/SIGINT, a service stopping). */
  signal?: AbortSignal;
  /** The run stops this long after it started. */
  timeLimitMs?: number;
};

/** A run's stop: `signal` aborts once the caller's signal does, the time limit passes, or the run calls `stop()`. */
export type StopControl = {
  readonly signal: AbortSignal;
  /** Stops the run from inside (a message limit reached, nothing left to do, a crash). */
  stop(): void;
  /** Clears the time limit and lets go of the caller's signal; call once when the run ends. */
  dispose(): void;
};

/**
 * Creates the stop of one run. A plain controller linked to the caller's signal rather than AbortSignal.any, which
 * Node 20 before 20.3 lacks: the time limit is a timer the run clears when it ends, so it never outlives the run.
 */
export function createStopControl(options: StopOptions = {}): StopControl {
  const controller = new AbortController();
  const stop = () => controller.abort();
  options.signal?.addEventListener('abort', stop, { once: true });
  if (options.signal?.aborted) stop();
  const timer = options.timeLimitMs !== undefined ? setTimeout(stop, options.timeLimitMs) : undefined;
  return {
    signal: controller.signal,
    stop,
    dispose() {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', stop);
    },
  };
}
