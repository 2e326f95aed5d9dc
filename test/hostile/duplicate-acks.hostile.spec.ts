// Duplicate PubAcks (a PubAck saying `duplicate` is checked with STREAM.MSG.GET): a relay that
// restarts after publishing rows it could not mark must mark them all sent, park none, and add nothing to the stream.
// Real libSQL file, real nats-server processes of this file's own (one with the permissions docs/production.md lists).
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openedEvent } from '../support/accounts.ts';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';
import { countRows, createTestDb, type TestDb } from '../support/db.ts';
import { waitForInfo } from '../support/nats.ts';
import { freePort } from '../support/process.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { drainOutbox, publishAsAKilledRelay, relayDeps } from '../support/relay.ts';
import { createStream, ownStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** Stores `n` events (a few per aggregate) as the service does. */
async function storeEvents(t: TestDb, n: number): Promise<void> {
  const events = Array.from({ length: n }, (_, i) => openedEvent({ accountId: `acc-${Math.floor(i / 3)}`, owner: `owner-${i}` }));
  for (let i = 0; i < events.length; i += 500)
    await t.deps.writer.write((tx) => appendToOutbox(tx, events.slice(i, i + 500), { registry: t.deps.registry, now: new Date() }));
}

/** What a relay killed after its PubAcks and before its mark left behind (as the broker's admin where it has users). */
async function publishUnmarked(t: TestDb, url: string, stream: StreamSettings): Promise<void> {
  const nc = await connect({ servers: [url], user: 'admin', pass: 'admin' }).catch(() => connect({ servers: [url] }));
  try {
    await publishAsAKilledRelay(t, nc, stream);
  } finally {
    await nc.close();
  }
}

async function streamMessages(url: string, stream: StreamSettings, auth: { user?: string; pass?: string } = {}): Promise<number> {
  const nc = await connect({ servers: [url], ...auth });
  try {
    return (await (await jetstreamManager(nc)).streams.info(stream.name)).state.messages;
  } finally {
    await nc.close();
  }
}

describe('relay - a relay restarted after publishing rows it never marked', () => {
  it('marks 3,000 acknowledged-but-unmarked rows sent as duplicates, parks none and stores nothing twice', async () => {
    await using t = await createTestDb();
    const stream = ownStream('DUPS');
    await createStream(nats().nc, stream);
    await storeEvents(t, 3000);
    await publishUnmarked(t, nats().url, stream);
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxInFlight: 256 } }));
    expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(3000);
    expect(await countRows(t.client, 'outbox', "status != 'sent'")).toBe(0);
    expect(summary.duplicates).toBe(3000);
    expect(await streamMessages(nats().url, stream)).toBe(3000);
  });
});

/**
 * A nats-server of this test's own whose user `relay` has exactly the permissions docs/production.md lists, less
 * `$JS.API.STREAM.MSG.GET.<stream>` unless `messageGet`.
 */
async function startNatsWithDocumentedPermissions(stream: StreamSettings, messageGet: boolean) {
  const port = await freePort();
  const storeDir = mkdtempSync(join(tmpdir(), 'nats-perm-'));
  const name = `perm-${process.pid}-${storeDir.slice(-6)}`;
  const q = (s: string) => JSON.stringify(s);
  const publish = [
    `${stream.prefix}.>`,
    `_OUTBOX.kick.${stream.name}`,
    '$JS.API.INFO',
    `$JS.API.STREAM.INFO.${stream.name}`,
    `$JS.API.STREAM.CREATE.${stream.name}`,
    ...(messageGet ? [`$JS.API.STREAM.MSG.GET.${stream.name}`] : []),
    `$JS.API.CONSUMER.>`,
    `$JS.ACK.${stream.name}.>`,
  ];
  const conf = join(storeDir, 'server.conf');
  writeFileSync(
    conf,
    `listen: "127.0.0.1:${port}"
server_name: ${q(name)}
jetstream { store_dir: ${q(storeDir)} }
authorization {
  users = [
    { user: admin, password: admin }
    { user: relay, password: relay, permissions: {
        publish: { allow: [${publish.map(q).join(', ')}] }
        subscribe: { allow: [${q(`_OUTBOX.kick.${stream.name}`)}, "_INBOX.>"] } } }
  ]
}
`,
  );
  const p = spawn('nats-server', ['-c', conf], { stdio: 'ignore' });
  await waitForInfo(port, 15_000, { name, alive: () => p.exitCode === null && p.signalCode === null });
  return {
    url: `nats://127.0.0.1:${port}`,
    async [Symbol.asyncDispose]() {
      p.kill('SIGKILL');
      await new Promise((r) => (p.exitCode !== null || p.signalCode !== null ? r(undefined) : p.once('exit', r)));
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}

describe('relay - restarted after publishing rows it never marked, with the NATS permissions docs/production.md lists', () => {
  for (const messageGet of [true, false]) {
    it(`marks them sent and parks none${messageGet ? '' : ', and says once that it cannot compare duplicates without STREAM.MSG.GET'}`, async () => {
      await using t = await createTestDb();
      const stream = ownStream('PERMS');
      await using server = await startNatsWithDocumentedPermissions(stream, messageGet);
      const admin = await connect({ servers: [server.url], user: 'admin', pass: 'admin' });
      await createStream(admin, stream);
      await admin.close();
      const lines: string[] = [];
      const relayOver = {
        stream,
        settings: { maxAttempts: 2 },
        log: createLogger('debug', (l) => lines.push(l), { service: 'test', version: '1' }),
        connect: () => connect(natsConnectionOptions({ servers: [server.url], name: 'perm relay', user: 'relay', pass: 'relay' })),
      };
      // control: with the same permissions, rows never published before go out
      await storeEvents(t, 10);
      await createRelay(relayDeps(t, server.url, relayOver)).run({ untilIdle: true, timeLimitMs: 8000 });
      expect(await countRows(t.client, 'outbox', "status = 'sent'")).toBe(10);
      // then a relay publishes 20 more and is killed before marking them; the next one starts
      await storeEvents(t, 20);
      await publishUnmarked(t, server.url, stream);
      const summary = await createRelay(relayDeps(t, server.url, relayOver)).run({ untilIdle: true, timeLimitMs: 8000 });
      const failed = (await t.client.execute("SELECT last_error FROM outbox WHERE status != 'sent' LIMIT 1")).rows[0]?.last_error;
      expect(await countRows(t.client, 'outbox', "status = 'failed'"), `parked: ${String(failed)}`).toBe(0);
      expect(await countRows(t.client, 'outbox', "status = 'sent'"), `still pending after 8 s: ${JSON.stringify(summary)}`).toBe(30);
      expect(summary.duplicates).toBe(20);
      expect(await streamMessages(server.url, stream, { user: 'admin', pass: 'admin' })).toBe(30);
      const refusals = lines.filter((l) => l.includes('STREAM.MSG.GET'));
      expect(refusals).toHaveLength(messageGet ? 0 : 1);
    });
  }
});
