// npm run bench:cleanup [-- --rows 100000] [--rate 500] [--idle-seconds 10] [--warmup 2] [--batch 10000] [--runtime node]
// POST latency while outbox compaction deletes old `sent` rows, against the latency just before it (idle).
//   1. a fresh service database gets `rows` sent outbox rows two days old, inserted with one plain SQL statement;
//   2. the service (ROLES=api,relay, private nats-server) takes POST /orders at a fixed rate (open model);
//   3. after idle-seconds, a second process runs compactOutbox (what `npm run cli -- outbox:compact` runs) over the
//      same file with a cutoff of one hour ago, so it deletes exactly the pre-filled rows, `batch` per transaction;
//   4. the load goes on until the compactor is done (+1 s), bounded by idle-seconds + 120 s.
// p50/p99/max of requests due in the idle window (after the warm-up) vs those due while the compactor was deleting.
// No assertion on timings.
import { createClient } from '@libsql/client';
import { join } from 'node:path';
import { migrateDatabase } from '../src/db/migrate.ts';
import { prepareLocalDatabase } from '../src/db/open-database.ts';
import { MIGRATIONS_FOLDER } from '../src/entry/boot.ts';
import { createTempDir } from '../test/support/db.ts';
import { orderBody } from '../test/support/example-orders.ts';
import { runtimeCommand, type Runtime } from '../test/support/process.ts';
import { startChild, startServer, stringArg, type Child } from './variants/launch.ts';
import { describeMachine } from './variants/machine.ts';
import { runPacedLoad, summarize } from './variants/paced-load.ts';
import { numberArg, percentile, round, saveResult, startNats } from './support.ts';

const ROWS = numberArg('rows', 100_000);
const RATE = numberArg('rate', 500);
const IDLE_SECONDS = numberArg('idle-seconds', 10);
const WARMUP = numberArg('warmup', 2);
const BATCH = numberArg('batch', 10_000);
const RUNTIME = stringArg('runtime', 'node') as Runtime;
const DAY_MS = 86_400_000;

/** Inserts `n` sent outbox rows with a realistic ~300-byte payload, sent two days ago, in one statement. */
async function prefill(url: string, n: number): Promise<number> {
  const client = createClient({ url, timeout: 5000 });
  await prepareLocalDatabase(client);
  await migrateDatabase(client, MIGRATIONS_FOLDER);
  const at = Date.now() - 2 * DAY_MS;
  const payload = JSON.stringify({
    eventId: '00000000-0000-7000-8000-000000000000',
    type: 'order.placed.v1',
    aggregateType: 'order',
    aggregateId: '00000000-0000-7000-8000-000000000001',
    aggregateVersion: 1,
    occurredAt: new Date(at).toISOString(),
    data: { orderId: '00000000-0000-7000-8000-000000000001', ...orderBody(), totalCents: 2999, placedAt: new Date(at).toISOString() },
  });
  const start = performance.now();
  await client.execute({
    sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, headers, status, attempts, occurred_at, available_at, sent_at)
          WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
          SELECT 'prefill-' || i, 'order', 'prefill-' || i, 'order.placed.v1', ?, '{}', 'sent', 0, ?, ?, ? FROM n`,
    args: [n, payload, at, at, at],
  });
  const ms = performance.now() - start;
  client.close();
  return ms;
}

type CompactorLine = { step: 'start' | 'batch' | 'done'; at: number; batches?: number; deleted?: number; batchMs?: number };

async function main() {
  const nats = await startNats();
  const tmp = createTempDir('hono-outbox-cleanup-');
  const url = `file:${join(tmp.dir, 'app.db')}`;
  const children: Child[] = [];
  try {
    const prefillMs = await prefill(url, ROWS);
    console.log(`cleanup: ${ROWS} sent rows pre-filled in ${Math.round(prefillMs)} ms; ${RATE} POST/s to the ${RUNTIME} service (ROLES=api,relay)`);
    const env = { DATABASE_URL: url, NATS_URL: nats.url, LOG_LEVEL: 'warn' };
    const service = await startServer('service', RUNTIME, `src/entry/${RUNTIME}.ts`, { ...env, ROLES: 'api,relay' });
    children.push(service);

    const lines: CompactorLine[] = [];
    let compactor: Child | undefined;
    let doneAt: number | undefined;
    const startCompactor = () => {
      const { cmd, args } = runtimeCommand('node', 'bench/variants/compact.ts');
      compactor = startChild('compactor', cmd, args, { ...env, COMPACT_CUTOFF_MS: String(Date.now() - 3_600_000), COMPACT_BATCH: String(BATCH) });
      children.push(compactor);
      compactor.onLine((line) => {
        if (!line.startsWith('{')) return;
        const parsed = JSON.parse(line) as CompactorLine;
        lines.push(parsed);
        if (parsed.step === 'done') doneAt = parsed.at;
      });
      void compactor.exited.then(() => (doneAt ??= Date.now()));
    };
    const timer = setTimeout(startCompactor, IDLE_SECONDS * 1000);
    const loadStart = Date.now();
    const load = await runPacedLoad({
      url: `${service.url}/orders`,
      body: JSON.stringify(orderBody()),
      rate: RATE,
      maxMs: (IDLE_SECONDS + 120) * 1000,
      until: () => doneAt !== undefined && Date.now() > doneAt + 1000,
    });
    clearTimeout(timer);
    if (compactor) await compactor.exited;
    for (const c of children.splice(0).reverse()) await c.stop();

    const start = lines.find((l) => l.step === 'start')?.at;
    const done = lines.find((l) => l.step === 'done');
    const batches = lines.filter((l) => l.step === 'batch');
    if (start === undefined || !done) throw new Error(`the compactor did not finish; output:\n${compactor?.output() ?? 'not started'}`);
    const idle = load.samples.filter((s) => s.dueAt >= loadStart + WARMUP * 1000 && s.dueAt < start);
    const during = load.samples.filter((s) => s.dueAt >= start && s.dueAt <= done.at);
    const client = createClient({ url });
    const left = Number((await client.execute("SELECT count(*) FROM outbox WHERE id LIKE 'prefill-%'")).rows[0]![0]);
    client.close();

    const result = {
      bench: 'cleanup',
      runtime: RUNTIME,
      rows: ROWS,
      prefillMs: Math.round(prefillMs),
      rate: RATE,
      sentRate: load.sentRate,
      batchSize: BATCH,
      compaction: {
        deleted: done.deleted,
        leftOver: left,
        batches: done.batches,
        totalMs: done.at - start,
        rowsPerSec: Math.round((done.deleted ?? 0) / ((done.at - start) / 1000)),
        batchMs: batches.map((b) => b.batchMs),
      },
      idle: summarize(idle, percentile),
      duringCompaction: summarize(during, percentile),
      p99Ratio: NaN,
      machine: await describeMachine(),
    };
    result.p99Ratio = round(result.duringCompaction.p99Ms / result.idle.p99Ms);
    const show = (s: typeof result.idle) => `p50 ${s.p50Ms} ms, p99 ${s.p99Ms} ms, max ${s.maxMs} ms (${s.requests} requests, ${s.failed} failed)`;
    console.log(
      `compaction: ${done.deleted} rows in ${done.batches} batches, ${result.compaction.totalMs} ms (${result.compaction.rowsPerSec} rows/s; batches ${result.compaction.batchMs.join(', ')} ms); ${left} pre-filled rows left`,
    );
    console.log(`POST idle:              ${show(result.idle)}`);
    console.log(`POST during compaction: ${show(result.duringCompaction)}`);
    console.log(`p99 during / idle = ${result.p99Ratio}`);
    if (result.idle.p50Ms > 1000)
      console.log(
        `MISS: the service did not keep up with ${RATE} POST/s even before compaction (idle p50 ${result.idle.p50Ms} ms): the ratio compares two overloads; lower --rate`,
      );
    console.log(`results: ${saveResult('cleanup', result)}`);
  } finally {
    for (const c of children.reverse()) await c.stop();
    tmp[Symbol.dispose]();
    await nats[Symbol.asyncDispose]();
  }
}

await main();
