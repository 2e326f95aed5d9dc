// The relay's and the consumer runner's connect loop against a broker host that accepts TCP connections and never
// answers: a stop signal must not wait for the client's connect timeout (20 s).
import { createServer, type Server, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { createRelay } from '../../src/outbox/relay.ts';
import { audit } from '../support/fixture/subscribers/audit/subscriber.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { createTestDb } from '../support/db.ts';
import { relayDeps } from '../support/relay.ts';
import { ownStream } from '../support/stream.ts';

/** A TCP server that accepts connections and never says a word (a broker host that hangs, or a half-open proxy). */
async function silentServer(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `nats://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

/** Starts `run` with a signal, aborts it 300 ms later (while it connects), and resolves with the ms its run took to end. */
async function msToStop(run: (signal: AbortSignal) => Promise<unknown>): Promise<number> {
  const abort = new AbortController();
  const running = run(abort.signal);
  await new Promise((r) => setTimeout(r, 300));
  const stoppedAt = Date.now();
  abort.abort();
  await running;
  return Date.now() - stoppedAt;
}

describe('connect loops - a stop while connecting to a broker that never answers', () => {
  it('the relay stops within a second of its stop signal while a connect hangs on a broker that does not answer', async () => {
    // the stop lands while `connect` waits for the server's INFO (nats.js times out after 20 s)
    await using t = await createTestDb();
    const silent = await silentServer();
    try {
      const relay = createRelay(relayDeps(t, silent.url));
      expect(await msToStop((signal) => relay.run({ signal }))).toBeLessThan(1000);
    } finally {
      await silent.close();
    }
  });

  it('the consumer runner stops within a second of its stop signal while a connect hangs on a broker that does not answer', async () => {
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const silent = await silentServer();
    try {
      const runner = testRunner(sdb, silent.url, audit, ownStream('HANG'));
      expect(await msToStop((signal) => runner.run({ signal }))).toBeLessThan(1000);
    } finally {
      await silent.close();
    }
  });
});
