// What relay runs leave behind: abort listeners on the caller's signal across many runs, and timers or sockets
// after a run stopped on a frozen broker (SIGSTOP) with PubAcks given up.
import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { activeHandles } from '../support/frozen-broker.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { relayDeps } from '../support/relay.ts';
import { createStream, ownStream } from '../support/stream.ts';

describe('relay - what its runs leave behind', () => {
  it('leaves no abort listener on its caller signal after twenty runs until idle, and no MaxListeners warning', async () => {
    await using server = await startNats();
    await using t = await createTestDb();
    const stream = ownStream('RLIS');
    const nc = await natsClient(server.url);
    await createStream(nc, stream);
    await nc.close();
    const warnings: string[] = [];
    const onWarning = (w: Error) => void warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    try {
      const caller = new AbortController();
      const relay = createRelay(relayDeps(t, server.url, { stream }));
      const commands = accountCommands(t.deps);
      for (let i = 0; i < 20; i++) {
        await commands.openMany(3);
        await relay.run({ signal: caller.signal, untilIdle: true, timeLimitMs: 20_000 });
      }
      expect(getEventListeners(caller.signal, 'abort').length).toBe(0);
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.filter((w) => /MaxListeners/.test(w))).toEqual([]);
  }, 60_000);

  it('leaves no timer and no socket behind once a run stopped on a frozen broker with PubAcks awaited', async () => {
    await using server = await startNats();
    await using t = await createTestDb();
    const stream = ownStream('RRES');
    const nc = await natsClient(server.url);
    await createStream(nc, stream);
    await nc.close();
    await new Promise((r) => setTimeout(r, 200));
    const before = activeHandles();

    const relay = createRelay(relayDeps(t, server.url, { stream, settings: { publishTimeoutMs: 30_000 } }));
    const abort = new AbortController();
    const running = relay.run({ signal: abort.signal, timeLimitMs: 60_000 });
    await eventually(async () => relay.state() === 'connected', { what: 'the relay connected' });
    await server.pause();
    await accountCommands(t.deps).openMany(20);
    await new Promise((r) => setTimeout(r, 1000));
    abort.abort();
    const summary = await running;
    expect(summary.published).toBe(0);
    // what is left once the run resolved (the closed connection's socket may take a turn to go)
    await new Promise((r) => setTimeout(r, 300));
    const after = activeHandles();
    server.resume();
    expect(after).toEqual(before);
  }, 60_000);
});
