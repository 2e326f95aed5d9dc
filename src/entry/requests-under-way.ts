// The requests whose handler is still running, for a stopping server that must answer them before it cuts its
// connections. Web Standard only: the Node, Bun and Deno entries wrap their fetch handler with it.

export type RequestsUnderWay = {
  /** `fetch`, counting each request until its handler has settled. */
  fetch: (request: Request) => Promise<Response>;
  /** Resolves once no handler is running. */
  ended(): Promise<void>;
};

/** Wraps `fetch` to count the handlers running; `ended` waits until there are none. */
export function requestsUnderWay(fetch: (request: Request) => Response | Promise<Response>): RequestsUnderWay {
  let running = 0;
  const waiters: Array<() => void> = [];
  return {
    async fetch(request) {
      running++;
      try {
        return await fetch(request);
      } finally {
        running--;
        if (running === 0) for (const wake of waiters.splice(0)) wake();
      }
    },
    ended: () => (running === 0 ? Promise.resolve() : new Promise<void>((resolve) => waiters.push(resolve))),
  };
}
