/** How `eventually` polls: `timeoutMs` (default 15 000) every `everyMs` (default 25); `what` names the wait in its error. */
export type EventuallyOptions = { timeoutMs?: number; everyMs?: number; what?: string };

/**
 * Polls `check` until it returns a truthy value and returns that value; after `timeoutMs` it throws, naming `what`
 * and the last value seen.
 */
export async function eventually<T>(check: () => Promise<T> | T, options: EventuallyOptions = {}): Promise<NonNullable<T>> {
  const timeoutMs = options.timeoutMs ?? 15_000;
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > until)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${options.what ?? 'a condition'} (last value: ${JSON.stringify(value)})`);
    await new Promise((r) => setTimeout(r, options.everyMs ?? 25));
  }
}
