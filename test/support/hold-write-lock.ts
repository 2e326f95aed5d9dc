// Child process for database-outage tests: another process holding the SQLite write lock of a database.
// Usage: node --import tsx test/support/hold-write-lock.ts <database url>
// Reads commands from stdin, one a line, and answers each on stdout once done: `lock` (BEGIN IMMEDIATE, waiting up
// to 30 s for the lock) → `locked`, `release` (ROLLBACK) → `released`. Prints `ready` first; exits when stdin closes.
import { createClient, type Transaction } from '@libsql/client';
import { createInterface } from 'node:readline';

const [url] = process.argv.slice(2);
if (!url) {
  console.error('usage: hold-write-lock.ts <database url>');
  process.exit(64);
}
const client = createClient({ url, timeout: 30_000 });
let tx: Transaction | undefined;
console.log('ready');
for await (const line of createInterface({ input: process.stdin })) {
  try {
    if (line === 'lock') {
      tx ??= await client.transaction('write');
      console.log('locked');
    } else if (line === 'release') {
      await tx?.rollback();
      tx = undefined;
      console.log('released');
    }
  } catch (error) {
    console.log(`error ${String(error)}`);
  }
}
client.close();
