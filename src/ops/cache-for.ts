/**
 * `read`, run at most once per `ttlMs`: callers within that time, or while a read is running, share its result.
 * A read that rejects is not kept: the next caller reads again.
 */
export function cacheFor<T>(ttlMs: number, read: () => Promise<T>, now: () => number = () => Date.now()): () => Promise<T> {
  let kept: { at: number; value: Promise<T> } | undefined;
  return () => {
    if (kept && now() - kept.at < ttlMs) return kept.value;
    const value = read();
    const entry = { at: now(), value };
    kept = entry;
    value.catch(() => {
      if (kept === entry) kept = undefined;
    });
    return value;
  };
}
