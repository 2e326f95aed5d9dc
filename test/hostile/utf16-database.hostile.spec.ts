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
import { accountCommands } from '../support/accounts.ts';
import { createTempDir, type TestDb } from '../support/db.ts';
import { FIXTURE_MIGRATIONS, fixtureModules } from '../support/fixture/modules.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
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
});
