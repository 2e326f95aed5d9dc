/** `promise`'s value if it settles successfully within `ms`, else undefined (a timeout or a rejection; a later one is dropped). */
export function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), ms);
    const done = (value: T | undefined) => {
      clearTimeout(timer);
      resolve(value);
    };
    promise.then(done, () => done(undefined));
  });
}
