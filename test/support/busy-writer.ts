// Child process for write-lock fairness tests: another process writing to a database back to back, as a service
// does under a backlog or a burst of commands.
// Usage: node --import tsx test/support/busy-writer.ts <database url> <concurrent writers> <ms each write holds the lock>
// Opens the database as the service does (openClient and createWriter) and keeps `concurrent writers` write loops
// going, each inserting a row into busy_writes and holding its transaction open for the given ms. Prints `writing`
// once its first write committed; when stdin closes, stops, prints `wrote <rows>` and exits.
import { createInterface } from 'node:readline';
import { parseConfig } from '../../src/config.ts';
import { createDatabase, sqlOf } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { openClient } from '../../src/entry/boot.ts';
import { sleep } from '../../src/worker/sleep.ts';

const [url, concurrency, holdMs] = process.argv.slice(2);
if (!url || !Number(concurrency) || !(Number(holdMs) >= 0)) {
  console.error('usage: busy-writer.ts <database url> <concurrent writers> <ms each write holds the lock>');
  process.exit(64);
}
const client = await openClient(url, parseConfig({ DATABASE_URL: url, DATABASE_BUSY_TIMEOUT_MS: '60000' }));
const writer = createWriter(createDatabase(client));
let running = true;
let rows = 0;
const write = () =>
  writer.write(async (tx) => {
    await sqlOf(tx).execute("INSERT INTO busy_writes (by) VALUES ('busy')");
    await sleep(Number(holdMs));
  });
await write();
rows++;
console.log('writing');
const loops = Array.from({ length: Number(concurrency) }, async () => {
  while (running) {
    await write();
    rows++;
  }
});
for await (const _ of createInterface({ input: process.stdin })) {
  // any line is ignored: the test ends the run by closing stdin
}
running = false;
await Promise.all(loops);
console.log(`wrote ${rows}`);
client.close();
