// Text that holds bytes that are no UTF-8, as a script writes it (a Latin-1 import, `CAST(x'…' AS TEXT)`), in the
// tables the service reads. The libSQL driver cannot read such a value as text: it aborts the whole process (a panic,
// exit 134), so a relay that read one was restarted into the same row for good, and an operator listing the parked
// row took the API process down. Real libSQL files, real nats-server, the relay and the API as real processes.
import { afterEach, describe, expect, it } from 'vitest';
import { pageFailed } from '../../src/outbox/failed-rows.ts';
import { accountCommands, openedEvent } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { FIXTURE_ENTRY, runtimeCommand, spawnChild, spawnService, waitForHttp, type ChildHandle } from '../support/process.ts';
import { insertScriptRow, TextBytes, textWithBytes } from '../support/stored-row.ts';
import { ownStream, readStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const LATIN1_E = 0xe9;
const TOKEN = 'undecodable-text-admin-token';

/** The fixture's relay process on `env`, and what ended it (undefined while it runs). */
function startRelay(env: Record<string, string>): { relay: ChildHandle; ended: () => unknown } {
  const { cmd, args } = runtimeCommand('node', FIXTURE_ENTRY);
  const relay = spawnChild(cmd, args, { ...env, ROLES: 'relay' });
  cleanups.push(() => void relay.kill9());
  let exited: unknown;
  void relay.exited.then((e) => (exited = e));
  return { relay, ended: () => exited };
}

/** The relay's and API's environment over `url`, on this file's nats-server and `stream`. */
const serviceEnv = (url: string, stream: ReturnType<typeof ownStream>) => ({
  DATABASE_URL: url,
  NATS_URL: nats().url,
  ...streamEnv(stream),
  LOG_LEVEL: 'error',
  RELAY_POLL_MS: '20',
  RELAY_MAX_ATTEMPTS: '1',
});

/** Waits until `done` holds, failing at once with the relay's output if it exited. */
async function whileRelayRuns(r: ReturnType<typeof startRelay>, done: () => Promise<boolean>, what: string): Promise<void> {
  await eventually(
    async () => {
      if (r.ended()) throw new Error(`the relay exited (${JSON.stringify(r.ended())}):\n${r.relay.output()}`);
      return done();
    },
    { timeoutMs: 30_000, what },
  );
}

/** How many outbox rows have `status`. */
const countStatus = async (t: Pick<TestDb, 'client'>, status: string) =>
  Number((await t.client.execute(`SELECT count(*) AS n FROM outbox WHERE status = '${status}'`)).rows[0]!.n);

describe('outbox rows holding bytes that are no UTF-8', () => {
  it('the relay process parks each such row at once and publishes the others; the API lists them with U+FFFD and stays up', { timeout: 60_000 }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('UNDECODABLE');
    const [marked, edited] = await accountCommands(t.deps).openMany(2);
    // a row appendToOutbox stored, whose headers a script then rewrote: the mark no longer vouches for its text
    await t.client.execute({ sql: 'UPDATE outbox SET headers = CAST(? AS TEXT) WHERE aggregate_id = ?', args: [new Uint8Array([0x7b, 0xff, 0x7d]), edited!] });
    const badAggregate = openedEvent({ accountId: 'acc-latin1' });
    await insertScriptRow(t, badAggregate, { aggregate_id: textWithBytes('acc-', LATIN1_E) });
    // a later row of the same stored aggregate: it waits behind the parked one
    const heldBehind = openedEvent({ accountId: 'acc-latin1' });
    await insertScriptRow(t, { ...heldBehind, aggregateVersion: 2 }, { aggregate_id: textWithBytes('acc-', LATIN1_E) });
    const badId = openedEvent();
    await insertScriptRow(t, badId, { id: textWithBytes('evt-', 0xff, 0xfe) });
    const badType = openedEvent();
    await insertScriptRow(t, badType, { message_type: textWithBytes('account.opened.v1', 0x80) });
    const nulThenBad = openedEvent();
    await insertScriptRow(t, nulThenBad, { aggregate_type: textWithBytes('account', 0x00, 0xc3) });
    const badPayload = openedEvent({ owner: 'Jose' });
    await insertScriptRow(t, badPayload, { payload: textWithBytes(JSON.stringify(badPayload).replace('"Jose"}}', '"Jos'), LATIN1_E, 0x22, 0x7d, 0x7d) });
    // valid text that is not ASCII is read as it is
    const accented = openedEvent({ accountId: 'acc-é', owner: 'Zoë' });
    await insertScriptRow(t, accented);

    const env = serviceEnv(t.url, stream);
    const relay = startRelay(env);

    const statusOf = async (where: string, arg: string) =>
      String((await t.client.execute({ sql: `SELECT status FROM outbox WHERE ${where}`, args: [arg] })).rows[0]?.status);
    const published = new Set([marked!, accented.aggregateId]);
    await whileRelayRuns(relay, async () => (await countStatus(t, 'failed')) === 6, 'six rows parked');
    const messages = await readStream(nats().nc, stream);
    expect(new Set(messages.map((m) => m.event.aggregateId))).toEqual(published);
    expect(messages.find((m) => m.event.aggregateId === 'acc-é')?.event.data).toEqual({ accountId: 'acc-é', owner: 'Zoë' });
    expect(await statusOf('id = ?', heldBehind.eventId)).toBe('pending');
    expect(await statusOf('aggregate_id = ?', edited!)).toBe('failed');
    expect(relay.ended()).toBeUndefined();

    const failed = (await pageFailed(t.deps.db, { limit: 10 })).items;
    const errorOf = (id: string) => failed.find((f) => f.id === id)?.lastError;
    expect(errorOf(badAggregate.eventId)).toMatch(/aggregate_id column holds no text/);
    expect(errorOf(badType.eventId)).toMatch(/message_type column/);
    expect(errorOf(nulThenBad.eventId)).toMatch(/aggregate_type column/);
    expect(failed.find((f) => f.aggregateId === edited)?.lastError).toMatch(/headers column/);
    expect(failed.find((f) => f.id === 'evt-\ufffd\ufffd')?.lastError).toMatch(/id column/);
    expect(errorOf(badPayload.eventId)).toMatch(/UTF-8|encoded data/i);

    const api = await spawnService('node', FIXTURE_ENTRY, { ...env, ROLES: 'api', ADMIN_TOKEN: TOKEN });
    cleanups.push(() => void api.kill9());
    await waitForHttp(`${api.url}/health`, { child: api });
    const res = await fetch(`${api.url}/admin/outbox/failed?limit=50`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    const page = (await res.json()) as { items: Array<{ id: string; aggregateId: string; payload: unknown }> };
    expect(page.items).toHaveLength(6);
    expect(page.items.find((i) => i.id === badAggregate.eventId)?.aggregateId).toBe('acc-\ufffd');
    expect(page.items.find((i) => i.id === badPayload.eventId)?.payload).toBeDefined();
    expect((await fetch(`${api.url}/health`)).status).toBe(200);
    await relay.relay.stop('SIGTERM');
  });

  it('parks text whose bytes begin with FF FE (never UTF-8) instead of reading them as UTF-16, and a blob where text belongs', {
    timeout: 60_000,
  }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('UNDECODABLE_TAGS');
    const utf16le = (text: string) => Array.from(text).flatMap((c) => [c.charCodeAt(0) & 0xff, c.charCodeAt(0) >> 8]);
    const bom = openedEvent({ accountId: 'acc-bom' });
    await insertScriptRow(t, bom, { aggregate_id: new TextBytes(new Uint8Array([0xff, 0xfe, ...utf16le('acc-bom')])) });
    // the blob holds the payload's aggregate id, but SQL tells it from that text: read as text, its row could overtake
    const blob = openedEvent({ accountId: 'acc-blob' });
    await insertScriptRow(t, blob, { aggregate_id: new TextEncoder().encode('acc-blob') });
    const relay = startRelay(serviceEnv(t.url, stream));
    await whileRelayRuns(relay, async () => (await countStatus(t, 'failed')) === 2, 'both rows parked');
    expect(await readStream(nats().nc, stream)).toEqual([]);
    const failed = (await pageFailed(t.deps.db, { limit: 10 })).items;
    expect(failed.map((f) => f.lastError)).toEqual([
      expect.stringMatching(/aggregate_id column holds no text/),
      expect.stringMatching(/aggregate_id column holds no text/),
    ]);
    expect(failed[1]!.aggregateId).toBe('acc-blob');
  });
});

describe('other tables holding bytes that are no UTF-8', () => {
  it('a lease member whose owner holds them neither aborts the relay nor keeps it from publishing', { timeout: 60_000 }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('UNDECODABLE_LEASE');
    const [account] = await accountCommands(t.deps).openMany(1);
    // a host name in Latin-1, written by an operator's script; it expires in 3 s, and its share of the partitions with it
    await t.client.execute({
      sql: "INSERT INTO lease_members (scope, owner, expires_at, joined_at) VALUES ('relay', CAST(? AS TEXT), ?, 0)",
      args: [new Uint8Array([0x68, 0x6f, 0x73, 0x74, LATIN1_E]), Date.now() + 3000],
    });
    // and an expired lease of partition 0 held by another such owner
    await t.client.execute("INSERT INTO leases (scope, partition, owner, epoch, expires_at) VALUES ('relay', 0, CAST(x'6f6c64e9' AS TEXT), 3, 0)");
    const relay = startRelay(serviceEnv(t.url, stream));
    await whileRelayRuns(relay, async () => (await countStatus(t, 'pending')) === 0, 'the row published');
    expect((await readStream(nats().nc, stream)).map((m) => m.event.aggregateId)).toEqual([account]);
  });

  it('a retried command whose stored response holds them gets a 500 problem, is not run again, and the API stays up', { timeout: 60_000 }, async () => {
    await using t = await createTestDb();
    const api = await spawnService('node', FIXTURE_ENTRY, { ...serviceEnv(t.url, ownStream('UNDECODABLE_IDEM')), ROLES: 'api' });
    cleanups.push(() => void api.kill9());
    await waitForHttp(`${api.url}/health`, { child: api });
    const open = () =>
      fetch(`${api.url}/accounts`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'k-1' },
        body: JSON.stringify({ owner: 'Jose' }),
      });
    expect((await open()).status).toBe(201);
    await t.client.execute({ sql: "UPDATE idempotency_keys SET location = CAST(? AS TEXT) WHERE key = 'k-1'", args: [new Uint8Array([0x2f, 0x61, LATIN1_E])] });
    const again = await open();
    expect(again.status, api.output()).toBe(500);
    expect(again.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(await countStatus(t, 'pending')).toBe(1);
    expect((await fetch(`${api.url}/health`)).status).toBe(200);
  });
});
