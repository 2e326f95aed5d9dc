// A process with two local databases (the service's and a subscriber's, or two subscribers') whose write locks are
// both held by another process: each database's writer waits asynchronously, each probe blocking the event loop for
// up to the driver's wait. The process must still answer on its sockets (a liveness probe, /health, a heartbeat)
// within a bound, as it does with one database locked, instead of taking most of a second per request.
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { DatabaseBusyError } from '../../src/db/busy.ts';
import { createDatabase, sqlOf } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { busyWritesDatabase, type Cleanups } from '../support/busy-writers.ts';
import { startWriteLockHolder } from '../support/write-lock.ts';

const cleanups: Cleanups = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** Another process requesting GET `url` every 20 ms for `ms` after one warm-up request: resolves with each round trip in ms. */
function probeFromOutside(url: string, ms: number): Promise<number[]> {
  const code = `
    const [url, ms] = process.argv.slice(1);
    // the first fetch of a process loads its HTTP client (hundreds of ms on a loaded machine): not a round trip
    await (await fetch(url)).text();
    const until = performance.now() + Number(ms);
    const took = [];
    while (performance.now() < until) {
      const s = performance.now();
      await (await fetch(url)).text();
      took.push(Math.round(performance.now() - s));
      await new Promise((r) => setTimeout(r, 20));
    }
    console.log(JSON.stringify(took));`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code, url, String(ms)], { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanups.push(() => child.kill('SIGKILL'));
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  return new Promise((resolve, reject) =>
    child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as number[]) : reject(new Error(`prober exited ${code}`)))),
  );
}

async function lockedDatabase() {
  const { url, client } = await busyWritesDatabase(cleanups, 3000);
  const holder = await startWriteLockHolder(url);
  cleanups.push(() => holder[Symbol.asyncDispose]());
  await holder.lock();
  return createWriter(createDatabase(client));
}

async function roundTripsWhileWaiting(databases: number) {
  const writers = [];
  for (let i = 0; i < databases; i++) writers.push(await lockedDatabase());
  const server = createServer((_, res) => res.end('ok'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const probed = probeFromOutside(`http://127.0.0.1:${(server.address() as AddressInfo).port}/health`, 2800);
  // one write queued on each database: each waits its 3 s busy budget
  const writes = writers.map((w) =>
    w
      .write((tx) => sqlOf(tx).execute("INSERT INTO busy_writes (by) VALUES ('waiting')"))
      .then(
        () => 'committed',
        (error: unknown) => (error instanceof DatabaseBusyError ? 'busy' : String(error)),
      ),
  );
  const [took, outcomes] = await Promise.all([probed, Promise.all(writes)]);
  expect(outcomes).toEqual(Array(databases).fill('busy'));
  return took;
}

describe('writer - liveness while waiting on foreign locks', () => {
  it('with one local database locked by another process, requests from another process are answered within 300 ms while its write waits', async () => {
    const took = await roundTripsWhileWaiting(1);
    expect(took.length).toBeGreaterThan(20);
    expect(Math.max(...took), `round trips (ms): ${took.join(', ')}`).toBeLessThan(300);
  }, 60_000);

  it('with two local databases locked by another process, requests from another process are answered within 300 ms while a write waits on each', async () => {
    const took = await roundTripsWhileWaiting(2);
    expect(took.length).toBeGreaterThan(20);
    expect(Math.max(...took), `round trips (ms): ${took.join(', ')}`).toBeLessThan(300);
  }, 60_000);
});
