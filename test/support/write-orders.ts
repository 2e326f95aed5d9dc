// Child process for concurrency tests: places N orders in the database at URL through its own client and writer.
// Usage: node --import tsx test/support/write-orders.ts <database url> <count> <customer tag> [in-flight]
// Prints one JSON line {placed, ids} and exits 0; any failure exits 1 with the error on stderr.
import { createClient } from '@libsql/client';
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { createAppRegistry } from '../../src/events/catalog.ts';
import { createUuidV7 } from '../../src/ids.ts';
import { placeOrder } from '../../src/orders/place-order.ts';

const [url, countArg, tag = 'writer', inFlightArg = '4'] = process.argv.slice(2);
if (!url || !countArg) {
  console.error('usage: write-orders.ts <database url> <count> <customer tag> [in-flight]');
  process.exit(64);
}
const count = Number(countArg);
const inFlight = Number(inFlightArg);

const client = createClient({ url, timeout: 5000 });
try {
  const db = createDatabase(client);
  const writer = createWriter(db);
  const deps = { registry: createAppRegistry(), clock: () => new Date(), newId: createUuidV7() };
  const ids: string[] = [];
  // A few writes in flight at a time: some share a group commit, and the two processes interleave many commits.
  for (let i = 0; i < count; i += inFlight) {
    const batch = Array.from({ length: Math.min(inFlight, count - i) }, (_, j) =>
      writer.write((tx) =>
        placeOrder(tx, deps, {
          customerId: tag,
          currency: 'EUR',
          items: [{ sku: `${tag}-${i + j}`, quantity: 1, unitPriceCents: i + j }],
        }),
      ),
    );
    for (const order of await Promise.all(batch)) ids.push(order.id);
  }
  await writer.idle();
  console.log(JSON.stringify({ placed: ids.length, ids }));
} catch (error) {
  console.error(String(error));
  process.exitCode = 1;
} finally {
  client.close();
}
