// Child process for write-lock fairness tests: a light writer in a process of its own (a joining instance's lease
// claims, a relay's marks), writing one row at a time with a pause between writes.
// Usage: node --import tsx test/support/spaced-writer.ts <database url> <busy budget ms> <writes> <ms between writes>
// Opens the database as the service does (openClient and createWriter), prints `ready`, waits for a line on stdin,
// then does its writes one after the other, printing `ok <ms waited>` or `busy <ms waited>` (DatabaseBusyError) for
// each, and `done` once finished; exits when stdin closes.
import { createInterface } from 'node:readline';
import { parseConfig } from '../../src/config.ts';
import { DatabaseBusyError } from '../../src/db/busy.ts';
import { createDatabase, sqlOf } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { openClient } from '../../src/entry/boot.ts';
import { sleep } from '../../src/worker/sleep.ts';

const [url, budgetMs, writes, everyMs] = process.argv.slice(2);
if (!url || !Number(budgetMs) || !Number(writes) || !(Number(everyMs) >= 0)) {
  console.error('usage: spaced-writer.ts <database url> <busy budget ms> <writes> <ms between writes>');
  process.exit(64);
}
const client = await openClient(url, parseConfig({ DATABASE_URL: url, DATABASE_BUSY_TIMEOUT_MS: budgetMs }));
const writer = createWriter(createDatabase(client));
console.log('ready');
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
await lines.next();
for (let i = 0; i < Number(writes); i++) {
  await sleep(Number(everyMs));
  const started = performance.now();
  try {
    await writer.write((tx) => sqlOf(tx).execute("INSERT INTO busy_writes (by) VALUES ('spaced')"));
    console.log(`ok ${Math.round(performance.now() - started)}`);
  } catch (error) {
    if (!(error instanceof DatabaseBusyError)) throw error;
    console.log(`busy ${Math.round(performance.now() - started)}`);
  }
}
console.log('done');
for await (const _ of lines) {
  // the test ends the run by closing stdin
}
client.close();
