/** How a delay grows with the attempt number: base, 2×base, 4×base … capped at maxMs. */
export type BackoffSettings = { baseMs: number; maxMs: number; random?: (() => number) | undefined };

/** Exponential back-off: base, 2×base, 4×base … capped at maxMs, with ±20 % jitter (never above maxMs). */
export function backoffDelay(attempt: number, opts: BackoffSettings): number {
  const exp = Math.min(opts.maxMs, opts.baseMs * 2 ** Math.max(0, attempt - 1));
  const jitter = 0.8 + 0.4 * (opts.random ?? Math.random)();
  return Math.max(1, Math.min(opts.maxMs, Math.round(exp * jitter)));
}
