import { describe, expect, it } from 'vitest';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { accountCommands } from '../support/accounts.ts';
import { countRows, createTestDb, type TestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { publishAsAKilledRelay, relayDeps, runRelay } from '../support/relay.ts';
import { createStream, ownStream } from '../support/stream.ts';
import { freezingConnect, msToStop } from '../support/frozen-broker.ts';

/** Every pending row in the stream as a relay killed before its mark leaves them, still pending; returns how many. */
async function publishUnmarked(t: TestDb, url: string, stream: StreamSettings): Promise<number> {
  const nc = await natsClient(url);
  try {
    return await publishAsAKilledRelay(t, nc, stream);
  } finally {
    await nc.close();
  }
}

/** Messages the stream holds. */
async function storedCount(url: string, stream: StreamSettings): Promise<number> {
  const nc = await natsClient(url);
  try {
    const { jetstreamManager } = await import('@nats-io/jetstream');
    return (await (await jetstreamManager(nc)).streams.info(stream.name)).state.messages;
  } finally {
    await nc.close();
  }
}

describe('relay - a stop while a JetStream API request waits on a frozen broker', () => {
  it('stops within seconds while it looks up the stored body of a duplicate PubAck, and every row is sent once the broker answers again', async () => {
    await using server = await startNats();
    await using t = await createTestDb();
    const stream = ownStream('LOOKUP');
    const nc = await natsClient(server.url);
    await createStream(nc, stream);
    await nc.close();
    await accountCommands(t.deps).openMany(40);
    const rows = await publishUnmarked(t, server.url, stream);

    const frozen: { at?: number } = {};
    // requests wait 30 s, as RELAY_PUBLISH_TIMEOUT_MS may be set; the stop is meant not to depend on it
    const first = runRelay(
      relayDeps(t, server.url, {
        stream,
        connect: freezingConnect(server, /\.STREAM\.MSG\.GET\./, frozen, 'freezing relay'),
        settings: { publishTimeoutMs: 30_000 },
      }),
    );
    await eventually(() => frozen.at !== undefined, { what: 'a duplicate looked up', timeoutMs: 20_000 });
    await new Promise((r) => setTimeout(r, 200));
    const ms = await msToStop(first.stop);
    server.resume();
    expect.soft(ms, 'ms the stop took with the lookup waiting on the frozen broker').toBeLessThan(10_000);

    const second = runRelay(relayDeps(t, server.url, { stream }));
    await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === rows, { what: 'every row sent', timeoutMs: 20_000 });
    await second.stop();
    expect(await countRows(t.client, 'outbox', 'attempts > 0')).toBe(0);
    expect(await storedCount(server.url, stream)).toBe(rows);
  }, 90_000);

  it('stops within seconds while it ensures its stream on a broker that froze right after the connect', async () => {
    await using server = await startNats();
    await using t = await createTestDb();
    const stream = ownStream('ENSURE');
    await accountCommands(t.deps).openMany(10);

    const frozen: { at?: number } = {};
    const first = runRelay(
      relayDeps(t, server.url, { stream, connect: freezingConnect(server, /^\$JS\.API\./, frozen, 'freezing relay'), settings: { publishTimeoutMs: 30_000 } }),
    );
    await eventually(() => frozen.at !== undefined, { what: 'the first JetStream API request', timeoutMs: 20_000 });
    await new Promise((r) => setTimeout(r, 200));
    const ms = await msToStop(first.stop);
    server.resume();
    expect.soft(ms, 'ms the stop took with the stream being ensured on the frozen broker').toBeLessThan(10_000);

    const second = runRelay(relayDeps(t, server.url, { stream }));
    await eventually(async () => (await countRows(t.client, 'outbox', "status = 'sent'")) === 10, { what: 'every row sent', timeoutMs: 20_000 });
    await second.stop();
    expect(await storedCount(server.url, stream)).toBe(10);
  }, 90_000);
});
