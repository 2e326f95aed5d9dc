// The Cloudflare Workers entry's handlers called directly (they use Web APIs only): a binding the service cannot run
// with makes every request answer the `misconfigured` problem and every cron tick fail, each naming the binding in
// the log, whatever part of start-up would have tripped over it. Nothing here reaches a database or a broker.
import { afterEach, describe, expect, it, vi } from 'vitest';
import worker, { runScheduledRelay, type WorkerEnv } from '../../src/entry/worker.ts';

// resolvable names on a reserved domain: nothing is contacted before the bindings are checked
const REMOTE = { DATABASE_URL: 'libsql://db.example.invalid', NATS_WS_URL: 'wss://nats.example.invalid' };
const ctx = { waitUntil: () => undefined };

afterEach(() => {
  vi.restoreAllMocks();
});

/** Runs `fn` with console.error captured; returns what it resolved with and the lines written. */
async function logged<T>(fn: () => Promise<T>): Promise<{ value: T; lines: string }> {
  const lines: string[] = [];
  vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => void lines.push(args.join(' ')));
  const value = await fn();
  return { value, lines: lines.join('\n') };
}

describe('worker entry - bindings it cannot run with', () => {
  it.each([
    ['an ADMIN_TOKEN no Authorization header could carry', { ...REMOTE, ADMIN_TOKEN: 'not a bearer token, has spaces' }, 'ADMIN_TOKEN'],
    ['a DATABASE_URL without a host (libsql:)', { ...REMOTE, DATABASE_URL: 'libsql:' }, 'DATABASE_URL'],
    ['a DATABASE_URL with one slash (libsql:/db.example.invalid)', { ...REMOTE, DATABASE_URL: 'libsql:/db.example.invalid' }, 'DATABASE_URL'],
    ['a DATABASE_URL with a tls value the client refuses', { ...REMOTE, DATABASE_URL: 'libsql://db.example.invalid?tls=maybe' }, 'DATABASE_URL'],
    ['a DATABASE_URL with an unknown query parameter', { ...REMOTE, DATABASE_URL: 'https://db.example.invalid?pool=3' }, 'DATABASE_URL'],
  ])('%s: every request, /health too, answers 500 problem+json "Service misconfigured" and the log names it', async (_label, env, name) => {
    for (const path of ['/health', '/orders/x']) {
      const { value: res, lines } = await logged(() => worker.fetch(new Request(`https://svc.example.invalid${path}`), env as WorkerEnv, ctx));
      expect(res.status).toBe(500);
      expect(res.headers.get('content-type')).toBe('application/problem+json');
      expect(await res.json()).toMatchObject({ status: 500, title: 'Service misconfigured', instance: path });
      expect(lines).toMatch(new RegExp(`Invalid configuration: ${name}`));
    }
  });

  it.each([['-1'], ['0'], ['25s'], ['1e4'], ['900001']])(
    'a cron tick with RELAY_TIME_LIMIT_MS=%s fails naming RELAY_TIME_LIMIT_MS before it connects to anything',
    async (value) => {
      const { value: outcome, lines } = await logged(() =>
        runScheduledRelay({ ...REMOTE, RELAY_TIME_LIMIT_MS: value }).then(
          () => 'ran',
          (error: unknown) => (error instanceof Error ? error.message : String(error)),
        ),
      );
      expect(outcome).toMatch(/^Invalid configuration: RELAY_TIME_LIMIT_MS must be an integer between 1 and 900000/);
      expect(lines).toContain(outcome);
    },
  );

  it('a cron tick over a DATABASE_URL the client refuses fails naming DATABASE_URL', async () => {
    const { value: outcome } = await logged(() =>
      runScheduledRelay({ ...REMOTE, DATABASE_URL: 'libsql:' }).then(
        () => 'ran',
        (error: unknown) => (error instanceof Error ? error.message : String(error)),
      ),
    );
    expect(outcome).toMatch(/^Invalid configuration: DATABASE_URL/);
  });
});
