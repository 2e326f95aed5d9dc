// `npm run cli -- <command> [options]`: operational commands against DATABASE_URL.
import { createDatabase } from '../db/open-database.ts';
import { createWriter } from '../db/writer.ts';
import { migrateDatabase } from '../db/migrate.ts';
import { compactOutbox } from '../outbox/compact-outbox.ts';
import { listFailed, requeueFailed } from '../outbox/failed-rows.ts';
import { readOutboxStats } from '../outbox/outbox-stats.ts';
import { parseArgs, parseDuration, parsePositiveInt, UsageError } from './args.ts';
import { loadConfigOrExit, MIGRATIONS_FOLDER, openClient, openSubscriberDb } from './boot.ts';
import { findSubscriber } from '../consumers/subscribers.ts';
import { createAppRegistry } from '../events/catalog.ts';
import { listDeadLetters, replayDeadLetters } from '../inbox/dead-letters.ts';
import { createInboxDeps } from '../inbox/handle-once.ts';
import { compactInbox } from '../inbox/retention.ts';
import { createMetrics } from '../metrics/metrics.ts';

const USAGE = `usage: npm run cli -- <command> [options]
  outbox:stats                                   counts by status and the age of the oldest pending row
  outbox:failed [--limit 100]                    parked rows with their last error
  outbox:retry-failed (--id <event id> | --all)  put failed rows back to pending with attempts 0
  outbox:compact [--older-than 7d] [--batch 10000]  delete sent rows older than the cutoff, in batches
  inbox:dead-letters --consumer <name>           a subscriber's dead letters with their errors
  inbox:replay --consumer <name> (--id <event id> | --all)  re-apply dead letters through the inbox
  inbox:compact --consumer <name> [--older-than 30d] [--batch 10000]  delete inbox rows older than the cutoff`;

type Command = (args: string[]) => Promise<void>;

async function withDatabase<T>(fn: (d: { db: ReturnType<typeof createDatabase>; writer: ReturnType<typeof createWriter> }) => Promise<T>): Promise<T> {
  const config = loadConfigOrExit();
  const client = await openClient(config.DATABASE_URL, config);
  try {
    if (config.MIGRATE_ON_START) await migrateDatabase(client, MIGRATIONS_FOLDER);
    const db = createDatabase(client);
    return await fn({ db, writer: createWriter(db) });
  } finally {
    client.close();
  }
}

/** Opens the subscriber named by --consumer: its database, write queue and inbox dependencies. */
async function withSubscriber<T>(name: string | undefined, fn: (s: { db: ReturnType<typeof createDatabase>; inbox: ReturnType<typeof createInboxDeps> }) => Promise<T>): Promise<T> {
  if (!name) throw new UsageError('--consumer <name> is required');
  let subscriber;
  try {
    subscriber = findSubscriber(name);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const config = loadConfigOrExit();
  const client = await openSubscriberDb(config, name);
  try {
    const db = createDatabase(client);
    const inbox = createInboxDeps(subscriber, { writer: createWriter(db), registry: createAppRegistry(), metrics: createMetrics(), maxDeliver: config.CONSUMER_MAX_DELIVER });
    return await fn({ db, inbox });
  } finally {
    client.close();
  }
}

const commands: Record<string, Command> = {
  'outbox:stats': async (argv) => {
    parseArgs(argv, { values: [] });
    const stats = await withDatabase(({ db }) => readOutboxStats(db, new Date()));
    console.log(JSON.stringify(stats, null, 2));
  },
  'outbox:failed': async (argv) => {
    const { values } = parseArgs(argv, { values: ['limit'] });
    const limit = values.limit ? parsePositiveInt(values.limit, 'limit') : 100;
    const rows = await withDatabase(({ db }) => listFailed(db, limit));
    if (rows.length === 0) console.log('no failed outbox rows');
    for (const r of rows) {
      console.log(`${r.id}  ${r.messageType}  ${r.aggregateType}/${r.aggregateId}  attempts=${r.attempts}  occurred=${r.occurredAt}\n    ${r.lastError ?? ''}`);
    }
  },
  'outbox:retry-failed': async (argv) => {
    const { values, flags } = parseArgs(argv, { values: ['id'], flags: ['all'] });
    if (flags.has('all') === (values.id !== undefined)) throw new UsageError('give exactly one of --id <event id> or --all');
    const n = await withDatabase(({ writer }) => writer.write((tx) => requeueFailed(tx, values.id, Date.now())));
    if (values.id !== undefined && n === 0) {
      console.error(`no failed outbox row with id ${values.id}`);
      process.exitCode = 1;
      return;
    }
    console.log(`${n} row(s) re-queued`);
  },
  'outbox:compact': async (argv) => {
    const { values } = parseArgs(argv, { values: ['older-than', 'batch'] });
    const olderThanMs = parseDuration(values['older-than'] ?? '7d', 'older-than');
    const batch = values.batch ? parsePositiveInt(values.batch, 'batch') : 10_000;
    const cutoffMs = Date.now() - olderThanMs;
    const result = await withDatabase((d) =>
      compactOutbox(d, { cutoffMs, batch, onBatch: (p) => console.log(`batch ${p.batches}: ${p.deleted} sent row(s) deleted so far`) }),
    );
    console.log(`deleted ${result.deleted} sent row(s) older than ${new Date(cutoffMs).toISOString()} in ${result.batches} batch(es)`);
  },
  'inbox:dead-letters': async (argv) => {
    const { values } = parseArgs(argv, { values: ['consumer'] });
    const letters = await withSubscriber(values.consumer, ({ db }) => listDeadLetters(db, values.consumer!));
    if (letters.length === 0) console.log(`no dead letters for ${values.consumer}`);
    for (const d of letters) {
      console.log(`${d.eventId}  ${d.subject}  deliveries=${d.deliveries}  dead=${new Date(d.deadAt).toISOString()}\n    ${d.error}`);
    }
  },
  'inbox:replay': async (argv) => {
    const { values, flags } = parseArgs(argv, { values: ['consumer', 'id'], flags: ['all'] });
    if (flags.has('all') === (values.id !== undefined)) throw new UsageError('give exactly one of --id <event id> or --all');
    const report = await withSubscriber(values.consumer, ({ db, inbox }) => replayDeadLetters({ ...inbox, db }, values.id ?? 'all'));
    console.log(JSON.stringify(report, null, 2));
    if (report.failed.length > 0 || report.notFound.length > 0) process.exitCode = 1;
  },
  'inbox:compact': async (argv) => {
    const { values } = parseArgs(argv, { values: ['consumer', 'older-than', 'batch'] });
    const olderThanMs = parseDuration(values['older-than'] ?? '30d', 'older-than');
    const batch = values.batch ? parsePositiveInt(values.batch, 'batch') : 10_000;
    const result = await withSubscriber(values.consumer, ({ inbox }) => compactInbox({ writer: inbox.writer, clock: () => new Date() }, { olderThanMs, batch }));
    console.log(`deleted ${result.deleted} inbox row(s) of ${values.consumer} received before ${new Date(result.cutoff).toISOString()} in ${result.batches} batch(es)`);
  },
};

const [name, ...rest] = process.argv.slice(2);
const command = name ? commands[name] : undefined;
try {
  if (!command) throw new UsageError(name ? `unknown command ${name}` : 'missing command');
  await command(rest);
} catch (error) {
  if (error instanceof UsageError) {
    console.error(`${error.message}\n${USAGE}`);
    process.exit(2);
  }
  console.error(`error: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
}
