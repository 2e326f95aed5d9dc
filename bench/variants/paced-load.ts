// An open-model load generator: POSTs at a fixed rate whatever the answers do, so a slow server shows up as
// latency instead of as a lower request rate. Latency is measured from the moment a request was DUE (not from when
// a socket became free), which keeps queueing in the client inside the figure (no coordinated omission).
import { Agent, request } from 'node:http';

export type Sample = {
  /** Wall-clock time (epoch ms) at which the request was due. */
  dueAt: number;
  /** Due → full response read, in ms (fractional). */
  latencyMs: number;
  /** HTTP status, or 0 for a transport error or timeout. */
  status: number;
  /** With status 0: the transport error's code (ECONNRESET, …), or `timeout`. */
  error?: string;
};

export type PacedLoadOptions = {
  url: string;
  body: string;
  /** Requests per second. */
  rate: number;
  /** Hard bound on the sending phase. */
  maxMs: number;
  /** Checked every tick; sending stops once it returns true. */
  until?: () => boolean;
  /** Open sockets at most (keep-alive); requests beyond wait for one, their wait counted in their latency. */
  maxSockets?: number;
  /** Per-request bound once it has a socket; a request still unanswered then counts as status 0. */
  timeoutMs?: number;
  /** After the sending phase, how long to wait for outstanding answers (default 30 000); the rest count as status 0. */
  drainMs?: number;
};

export type PacedLoadResult = {
  /** One per request, in due order. */
  samples: Sample[];
  /** Requests per second actually issued during the sending phase. */
  sentRate: number;
  /** Sending phase, then the wait for the last answer. */
  sendMs: number;
  totalMs: number;
};

/** How long a keep-alive socket may sit idle in the pool: under the 5 s a Node server keeps one open. */
const IDLE_SOCKET_MS = 4000;

/** Sends POSTs of `body` to `url` at `rate`/s until `maxMs` passed or `until()`; resolves once every request was answered or timed out. */
export async function runPacedLoad(o: PacedLoadOptions): Promise<PacedLoadResult> {
  const target = new URL(o.url);
  // idle sockets are closed after 4 s, before Node's server closes them (its keepAliveTimeout, 5 s): a request sent on
  // a socket the server is closing at that moment fails with ECONNRESET without reaching it, a failure of the client
  const agent = new Agent({ keepAlive: true, maxSockets: o.maxSockets ?? 128, timeout: IDLE_SOCKET_MS });
  const timeoutMs = o.timeoutMs ?? 10_000;
  const samples: Sample[] = [];
  const inFlight = new Set<Promise<void>>();
  const open = new Set<ReturnType<typeof request>>();
  const wallStart = Date.now();
  const begin = performance.now();
  const intervalMs = 1000 / o.rate;

  const fire = (i: number) => {
    const due = begin + i * intervalMs;
    const p = new Promise<void>((resolve) => {
      const req = request(
        {
          host: target.hostname,
          port: target.port,
          path: target.pathname,
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(o.body) },
        },
        (res) => {
          res.resume();
          res.once('end', () => done(res.statusCode ?? 0));
          res.once('error', (error: NodeJS.ErrnoException) => done(0, error.code ?? error.message));
        },
      );
      let settled = false;
      const done = (status: number, error?: string) => {
        if (settled) return;
        settled = true;
        open.delete(req);
        samples.push({ dueAt: wallStart + (due - begin), latencyMs: performance.now() - due, status, ...(error ? { error } : {}) });
        resolve();
      };
      req.setTimeout(timeoutMs, () => {
        req.destroy();
        done(0, 'timeout');
      });
      req.once('error', (error: NodeJS.ErrnoException) => done(0, error.code ?? error.message));
      req.end(o.body);
      open.add(req);
    }).finally(() => inFlight.delete(p));
    inFlight.add(p);
  };

  let sent = 0;
  for (;;) {
    const elapsed = performance.now() - begin;
    if (elapsed >= o.maxMs || o.until?.()) break;
    const due = Math.floor(elapsed / intervalMs) + 1;
    while (sent < due) fire(sent++);
    await new Promise((r) => setTimeout(r, Math.max(1, Math.min(10, intervalMs))));
  }
  const sendMs = performance.now() - begin;
  const giveUp = setTimeout(() => {
    for (const req of open) req.destroy(new Error('no answer in time')); // queued or unanswered: settles as status 0
  }, o.drainMs ?? 30_000);
  await Promise.all(inFlight);
  clearTimeout(giveUp);
  agent.destroy();
  samples.sort((a, b) => a.dueAt - b.dueAt);
  return { samples, sentRate: Math.round(sent / (sendMs / 1000)), sendMs: Math.round(sendMs), totalMs: Math.round(performance.now() - begin) };
}

/**
 * p50/p99/max of the samples' latencies (2xx only), the statuses of those that were not 2xx (0 = timeout or transport
 * error) and the transport errors by code.
 */
export function summarize(samples: Sample[], percentile: (v: number[], p: number) => number) {
  const ok = samples.filter((s) => s.status >= 200 && s.status < 300).map((s) => s.latencyMs);
  const failedByStatus: Record<string, number> = {};
  const transportErrors: Record<string, number> = {};
  for (const s of samples) {
    if (s.status < 200 || s.status >= 300) failedByStatus[s.status] = (failedByStatus[s.status] ?? 0) + 1;
    if (s.error) transportErrors[s.error] = (transportErrors[s.error] ?? 0) + 1;
  }
  const r = (n: number) => Math.round(n * 100) / 100;
  return {
    requests: samples.length,
    failed: samples.length - ok.length,
    failedByStatus,
    transportErrors,
    p50Ms: r(percentile(ok, 50)),
    p99Ms: r(percentile(ok, 99)),
    maxMs: r(ok.length ? ok.reduce((m, v) => (v > m ? v : m), -Infinity) : NaN),
  };
}
