// A service database whose text encoding is UTF-16 (SQLite's `PRAGMA encoding`, fixed when the first table is
// created: a file made by another tool, or restored into one). `CAST(payload AS BLOB)` gives the text in the
// database's own encoding, so the relay's fetch reads the payload as text there and encodes it to UTF-8: otherwise every
// event appendToOutbox stored would fail the envelope check and JSON.parse, and be retried and parked.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { createLocalClient } from '../../src/db/local-client.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createDatabase, prepareLocalDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { silentLogger } from '../../src/logger.ts';
import { pageFailed } from '../../src/outbox/failed-rows.ts';
import { accountCommands, openedEvent } from '../support/accounts.ts';
import { createTempDir, type TestDb } from '../support/db.ts';
import { FIXTURE_MIGRATIONS, fixtureModules } from '../support/fixture/modules.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { insertScriptRow } from '../support/stored-row.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** createTestDb, on a file whose encoding was set to UTF-16le before the migrations created its tables. */
async function createUtf16TestDb(): Promise<TestDb> {
  const tmp = createTempDir();
  const url = `file:${join(tmp.dir, 'app.db')}`;
  const client = createLocalClient({ url, timeout: 5000 });
  await client.execute("PRAGMA encoding = 'UTF-16le'");
  await prepareLocalDatabase(client);
  await migrateDatabase(client, FIXTURE_MIGRATIONS.service);
  const deps = createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules), {});
  const close = () => {
    client.close();
    tmp[Symbol.dispose]();
  };
  return { dir: tmp.dir, url, client, deps, close, [Symbol.dispose]: close };
}

describe('relay - a service database whose text encoding is UTF-16', () => {
  it('publishes the events appendToOutbox stored, as the UTF-8 JSON subscribers read, instead of parking them', { timeout: 30_000 }, async () => {
    await using t = await createUtf16TestDb();
    expect((await t.client.execute('PRAGMA encoding')).rows[0]![0]).toBe('UTF-16le');
    const stream = ownStream('UTF16');
    const [id] = await accountCommands(t.deps).openMany(1);
    await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
    const row = (await t.client.execute('SELECT status, last_error FROM outbox')).rows[0]!;
    expect({ status: row.status, lastError: row.last_error }).toEqual({ status: 'sent', lastError: null });
    const messages = await readStream(nats().nc, stream);
    expect(messages.map((m) => m.event.aggregateId)).toEqual([id]);
  });

  it('parks script rows whose text or payload holds a lone surrogate (which the driver cannot read) and publishes one whose text is valid but not ASCII', {
    timeout: 30_000,
  }, async () => {
    await using t = await createUtf16TestDb();
    const stream = ownStream('UTF16_SURROGATE');
    const lone = openedEvent({ accountId: 'acc-lone' });
    await insertScriptRow(t, lone);
    // 'acc-' in UTF-16le, then a high surrogate with nothing after it (a bound blob would be converted as UTF-8)
    await t.client.execute({ sql: "UPDATE outbox SET aggregate_id = CAST(x'6100630063002d0000d8' AS TEXT) WHERE id = ?", args: [lone.eventId] });
    // and a payload: the event's JSON in UTF-16le, then a high surrogate with nothing after it
    const lonePayload = openedEvent({ accountId: 'acc-lone-payload' });
    await insertScriptRow(t, lonePayload);
    const hex = `${Buffer.from(JSON.stringify(lonePayload), 'utf16le').toString('hex')}00d8`;
    await t.client.execute({ sql: `UPDATE outbox SET payload = CAST(x'${hex}' AS TEXT) WHERE id = ?`, args: [lonePayload.eventId] });
    const accented = openedEvent({ accountId: 'acc-é😀', owner: 'Zoë' });
    await insertScriptRow(t, accented);
    await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
    const messages = await readStream(nats().nc, stream);
    expect(messages.map((m) => m.event.data)).toEqual([{ accountId: 'acc-é😀', owner: 'Zoë' }]);
    const [parked, parkedPayload] = (await pageFailed(t.deps.db, { limit: 10 })).items;
    expect(parked).toMatchObject({ id: lone.eventId, aggregateId: 'acc-\ufffd' });
    expect(parked?.lastError).toMatch(/aggregate_id column holds no text/);
    expect(parkedPayload).toMatchObject({ id: lonePayload.eventId, lastError: expect.stringMatching(/payload column holds no text/) });
  });
});
