import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Logger } from '../../src/logger.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { testRunner } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { NATS_SERVER_BIN, waitForInfo } from '../support/nats.ts';
import { freePort } from '../support/process.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { appliedEvents, eventIds, logLines, publishTogether, recorder, recordingDb } from '../support/recording-subscriber.ts';

// A subscriber whose NATS user may create and use its durable but not ephemeral consumers (least privilege written
// per consumer: `$JS.API.CONSUMER.CREATE.<stream>.<durable>.>` allowed, `$JS.API.CONSUMER.CREATE.<stream>` not): it
// starts and consumes, says at start that it cannot check for missing deliveries, and when one goes missing keeps
// the order anyway by writing nothing newer until the check's wait ran out.

let server: ChildProcess | undefined;
let dir = '';
let port = 0;
let admin: NatsConnection;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'nats-perm-'));
  port = await freePort();
  const conf = join(dir, 'server.conf');
  writeFileSync(
    conf,
    `jetstream { store_dir: "${join(dir, 'js')}" }
authorization {
  users: [
    { user: admin, password: admin }
    { user: sub, password: sub, permissions: { publish: { allow: [">"], deny: ["$JS.API.CONSUMER.CREATE.*"] }, subscribe: { allow: [">"] } } }
  ]
}
`,
  );
  const name = `perm-${process.pid}`;
  const p = spawn(NATS_SERVER_BIN, ['-c', conf, '-a', '127.0.0.1', '-p', String(port), '-n', name], { stdio: 'ignore' });
  server = p;
  await waitForInfo(port, 15_000, { name, alive: () => p.exitCode === null });
  admin = await connect({ servers: [`127.0.0.1:${port}`], user: 'admin', pass: 'admin' });
});
afterAll(async () => {
  await admin?.close();
  if (server && server.exitCode === null) {
    const exited = new Promise((r) => server!.once('exit', r));
    server.kill('SIGTERM');
    await exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

/** A first run of the `durable` subscriber that creates its durable consumer (`info` answers) and stops without pulling. */
async function createDurable(
  sdb: Parameters<typeof testRunner>[0],
  durable: string,
  stream: Parameters<typeof testRunner>[3],
  settings: Parameters<typeof testRunner>[4],
  info: () => Promise<unknown>,
): Promise<void> {
  const stop = new AbortController();
  const run = testRunner(sdb, `127.0.0.1:${port}`, recorder(durable), stream, settings).run({
    signal: stop.signal,
    timeLimitMs: 30_000,
    lease: { mayPull: () => false, holds: () => true },
  });
  await eventually(async () => (await info().catch(() => undefined)) !== undefined, { what: 'the durable' });
  stop.abort();
  await run;
}

describe('lost deliveries - a subscriber that may not create ephemeral consumers', () => {
  it('logs at start that it may not create the consumers it checks with, and still applies a missing event before the later event of its aggregate', async () => {
    const STREAM = await freshStream(admin, 'PERM');
    await using sdb = await recordingDb();
    const a = `perm-a-${process.pid}`;
    const b = `perm-b-${process.pid}`;
    const [a1, a2, a3] = [openedEvent({ accountId: a }), creditedEvent({ accountId: a, version: 2 }), creditedEvent({ accountId: a, version: 3 })];
    const [b1, b2] = [openedEvent({ accountId: b }), creditedEvent({ accountId: b, version: 2 })];
    const jsm = await jetstreamManager(admin);
    const info = () => jsm.consumers.info(STREAM.name, 'perm');
    const lines: string[] = [];
    const log: Logger = {
      debug: () => undefined,
      info: (m) => void lines.push(m),
      warn: (m, f) => void lines.push(`${m} ${JSON.stringify(f)}`),
      error: (m, f) => void lines.push(`${m} ${JSON.stringify(f)}`),
    };

    let pulling = true;
    const stop = new AbortController();
    const runner = testRunner(sdb, `127.0.0.1:${port}`, recorder('perm'), STREAM, {
      ackWaitMs: 4000, // a check that cannot finish stops all writes for 1.5 × 4000 + 1000 = 7000 ms
      pullExpiresMs: 1000,
      log,
      connect: () => connect({ servers: [`127.0.0.1:${port}`], user: 'sub', pass: 'sub' }),
    });
    const running = runner.run({ signal: stop.signal, timeLimitMs: 40_000, lease: { mayPull: () => pulling, holds: () => true } });
    await publishEvents(admin, STREAM, [a1!, b1!]);
    await eventually(async () => (await appliedEvents(sdb)).length === 2, { what: 'a1 and b1 applied: the subscriber starts and consumes' });
    await eventually(async () => lines.some((l) => l.includes('cannot create consumers') && l.includes('CONSUMER.CREATE')), {
      what: 'the error about the missing permission, logged at start',
    });

    pulling = false;
    await eventually(async () => (await info()).num_waiting === 0, { what: 'no pull request of the runner left' });
    await publishEvents(admin, STREAM, [a2!]);
    const thief = await connect({ servers: [`127.0.0.1:${port}`], user: 'admin', pass: 'admin' });
    try {
      const stolen = await (await jetstream(thief).consumers.get(STREAM.name, 'perm')).next({ expires: 2000 });
      expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(a2!.eventId);
      await publishEvents(admin, STREAM, [a3!, b2!]);
      pulling = true;
      await eventually(async () => (await appliedEvents(sdb)).length === 5, { timeoutMs: 15_000, what: 'every event applied' });
    } finally {
      await thief.close();
    }
    stop.abort();
    await running;
    const order = await appliedEvents(sdb);
    expect(order.filter((id) => eventIds([a1!, a2!, a3!]).includes(id))).toEqual(eventIds([a1!, a2!, a3!]));
    expect(order.filter((id) => eventIds([b1!, b2!]).includes(id))).toEqual(eventIds([b1!, b2!]));
  });

  it('stops promptly while a check for missing deliveries keeps failing, handing back what it holds', async () => {
    const STREAM = await freshStream(admin, 'PSTOP');
    await using sdb = await recordingDb();
    const c = `perm-c-${process.pid}`;
    const [c1, c2] = [openedEvent({ accountId: c }), creditedEvent({ accountId: c, version: 2 })];
    const jsm = await jetstreamManager(admin);
    const info = () => jsm.consumers.info(STREAM.name, 'permstop');
    const settings = {
      ackWaitMs: 20_000, // a failing check would hold the run for 31 s
      pullExpiresMs: 1000,
      connect: () => connect({ servers: [`127.0.0.1:${port}`], user: 'sub', pass: 'sub' }),
    };
    await createDurable(sdb, 'permstop', STREAM, settings, info);
    const before = (await info()).delivered.stream_seq;
    await publishEvents(admin, STREAM, [c1!]);
    const thief = await connect({ servers: [`127.0.0.1:${port}`], user: 'admin', pass: 'admin' });
    try {
      // c1 is delivered and never answered: the next run starts with a message unacknowledged, and checks
      const stolen = await (await jetstream(thief).consumers.get(STREAM.name, 'permstop')).next({ expires: 2000 });
      expect(stolen?.headers?.get('Nats-Msg-Id')).toBe(c1!.eventId);
      await publishEvents(admin, STREAM, [c2!]);
      const stop2 = new AbortController();
      const second = testRunner(sdb, `127.0.0.1:${port}`, recorder('permstop'), STREAM, settings).run({ signal: stop2.signal, timeLimitMs: 30_000 });
      await eventually(async () => (await info()).delivered.stream_seq > before + 1, { what: 'c2 delivered to the run' });
      await new Promise((r) => setTimeout(r, 1500));
      const stopping = Date.now();
      stop2.abort();
      await second;
      expect(Date.now() - stopping).toBeLessThan(5000); // not the 31 s a failing check could hold the run
      expect(await appliedEvents(sdb)).toEqual([]);
      // c2 was handed back (nak): only c1, still with the thief, and c2, due again, await acknowledgement
      expect(await info()).toMatchObject({ num_ack_pending: 2 });
    } finally {
      await thief.close();
    }
  });

  // A run restarting after a crash with one message unacknowledged (c1, held by the run that died) and a backlog
  // beyond max_ack_pending behind it (1200 events; max_ack_pending is max(1000, 4 × batch) = 1024 with the default
  // batch): it holds max_ack_pending messages, every one held back by the refused check, whose wait runs down only
  // while a pull request is out. A run that pulled only for awaited messages stopped pulling there, the wait never
  // ran out, and nothing was ever written on a healthy broker.
  it('applies the backlog after a crash within a few waits although the check for missing deliveries is refused', async () => {
    const STREAM = await freshStream(admin, 'PFULL');
    await using sdb = await recordingDb();
    const jsm = await jetstreamManager(admin);
    const info = () => jsm.consumers.info(STREAM.name, 'permfull');
    const ACK_WAIT_MS = 2000; // one wait: 1.5 × 2 s + 1 s = 4 s of pulling time
    const BACKLOG = 1200; // more than max_ack_pending (1024 with the default batch of 256)
    const fullSettings = {
      ackWaitMs: ACK_WAIT_MS,
      pullExpiresMs: 1000,
      connect: () => connect({ servers: [`127.0.0.1:${port}`], user: 'sub', pass: 'sub' }),
    };

    await createDurable(sdb, 'permfull', STREAM, fullSettings, info);

    // the run that "crashed": it took c1 and never answered it
    const id = `${process.pid}-${Date.now()}`;
    const c1 = openedEvent({ accountId: `c-${id}` });
    await publishEvents(admin, STREAM, [c1]);
    const crashed = await connect({ servers: [`127.0.0.1:${port}`], user: 'admin', pass: 'admin' });
    const taken = await (await jetstream(crashed).consumers.get(STREAM.name, 'permfull')).next({ expires: 2000 });
    expect(taken?.headers?.get('Nats-Msg-Id')).toBe(c1.eventId);
    await crashed.close();

    // the backlog, one aggregate each (none of them waits for c1)
    const backlog = Array.from({ length: BACKLOG }, (_, i) => openedEvent({ accountId: `k-${i}-${id}` }));
    await publishTogether(admin, STREAM.prefix, backlog);

    const { log, lines } = logLines();
    const stop2 = new AbortController();
    const second = testRunner(sdb, `127.0.0.1:${port}`, recorder('permfull'), STREAM, { ...fullSettings, log }).run({
      signal: stop2.signal,
      timeLimitMs: 50_000,
    });
    try {
      // one wait of 4 s of pulling time, and c1 comes back after its ack_wait: 30 s is several times what it needs
      await eventually(async () => (await appliedEvents(sdb)).length === BACKLOG + 1, {
        what: 'every event applied',
        timeoutMs: 30_000,
      }).catch(async (error: unknown) => {
        const i = await info();
        throw new Error(
          `${String(error)}\napplied: ${(await appliedEvents(sdb)).length} of ${BACKLOG + 1}; durable: num_ack_pending=${i.num_ack_pending} num_waiting=${i.num_waiting} num_pending=${i.num_pending}\nlog:\n${lines.slice(0, 12).join('\n')}`,
        );
      });
    } finally {
      stop2.abort();
      await second.catch(() => undefined);
    }
  }, 60_000);
});
