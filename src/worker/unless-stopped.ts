/**
 * `work`'s value, or undefined at once when `signal` aborts first (also when it already has); rejects when `work` rejects
 * before that. What `work` does after the abort is dropped, a rejection included.
 */
export function unlessStopped<T>(work: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  return new Promise((resolve, reject) => {
    const stopped = () => resolve(undefined);
    if (signal.aborted) stopped();
    else signal.addEventListener('abort', stopped, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', stopped);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', stopped);
        reject(error);
      },
    );
  });
}
