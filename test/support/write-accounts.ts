// Child process for concurrency tests: opens N fixture accounts in the database at URL through its own client and writer.
// Usage: node --import tsx test/support/write-accounts.ts <database url> <count> <owner> [in-flight]
// Prints one JSON line {opened, ids} and exits 0; any failure exits 1 with the error on stderr.
import { createClient } from '@libsql/client';
import { registryOf } from '../../src/compose/define-modules.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { createUuidV7 } from '../../src/ids.ts';
import { accountCommands } from './accounts.ts';
import { fixtureModules } from './fixture/modules.ts';

const [url, countArg, owner = 'writer', inFlightArg = '4'] = process.argv.slice(2);
if (!url || !countArg) {
  console.error('usage: write-accounts.ts <database url> <count> <owner> [in-flight]');
  process.exit(64);
}
const count = Number(countArg);
const inFlight = Number(inFlightArg);

const client = createClient({ url, timeout: 5000 });
try {
  const writer = createWriter(createDatabase(client));
  const accounts = accountCommands({ writer, registry: registryOf(fixtureModules), clock: () => new Date(), newId: createUuidV7() });
  const ids: string[] = [];
  // A few writes in flight at a time: some share a group commit, and the two processes interleave many commits.
  for (let i = 0; i < count; i += inFlight) {
    ids.push(...(await Promise.all(Array.from({ length: Math.min(inFlight, count - i) }, () => accounts.open(owner)))));
  }
  await writer.idle();
  console.log(JSON.stringify({ opened: ids.length, ids }));
} catch (error) {
  console.error(String(error));
  process.exitCode = 1;
} finally {
  client.close();
}
