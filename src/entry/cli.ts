// `npm run cli -- <command> [options]`: operational commands against DATABASE_URL. Every argument is checked, and
// every refusal made, before a database is opened: a bad command line exits 2 and changes nothing. Only the argument
// parser is loaded up front; a command loads what it runs once its arguments are checked, so a mistyped command line
// is answered without loading the database driver, the broker client or the modules.
import type { Config } from '../config.ts';
import type { Database } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import type { InboxDeps } from '../inbox/handle-once.ts';
import type { Subscriber } from '../inbox/subscriber.ts';
import { formatDuration } from '../duration.ts';
import { parseArgs, parseDurationOption, parsePositiveInt, UsageError } from './args.ts';

const USAGE = `usage: npm run cli -- <command> [options]
  outbox:stats                                   counts by status and the age of the oldest pending row
  outbox:failed [--limit 100]                    parked rows with their last error
  outbox:retry-failed (--id <event id> | --all)  put failed rows back to pending, due at once
  outbox:compact [--older-than <OUTBOX_RETENTION>] [--batch 10000]  delete sent rows older than the cutoff, in batches
  idempotency:compact [--older-than <IDEMPOTENCY_RETENTION>] [--batch 10000] [--force]  forget older Idempotency-Keys
  inbox:dead-letters --consumer <name>           a subscriber's dead letters with their errors
  inbox:replay --consumer <name> (--id <event id> | --all)  re-apply dead letters through the inbox
  inbox:compact --consumer <name> [--older-than <INBOX_RETENTION_DAYS>] [--batch 10000] [--force]  delete older inbox rows
  db:vacuum [--consumer <name>]                  one-time VACUUM to auto_vacuum=INCREMENTAL (the service's database, or a subscriber's)
durations: 500ms, 30s, 15m, 2h, 7d (up to 3650d); --batch: 1 to 100000; --limit: 1 to 10000.
A compaction shorter than the guarantee it serves is refused (exit 2) unless --force.`;

const MAX_BATCH = 100_000;

/** An operation that would break a guarantee: its one-line reason is printed and the CLI exits 2. */
class RefusedError extends Error {
  override readonly name = 'RefusedError';
}

type Command = (args: string[]) => Promise<void>;

let loaded: Config | undefined;
/** The configuration, loaded once (a bad value exits 2 before anything is opened). */
const config = async () => (loaded ??= (await import('./open-databases.ts')).loadConfigOrExit());

const batchOption = (values: Record<string, string>) => (values.batch !== undefined ? parsePositiveInt(values.batch, 'batch', MAX_BATCH) : undefined);

async function withDatabase<T>(fn: (d: { db: Database; writer: Writer }) => Promise<T>): Promise<T> {
  const cfg = await config();
  const [{ openClient, migrateOrExit, MIGRATIONS_FOLDER }, { createDatabase }, { createWriter }] = await Promise.all([
    import('./open-databases.ts'),
    import('../db/open-database.ts'),
    import('../db/writer.ts'),
  ]);
  const client = await openClient(cfg.DATABASE_URL, cfg);
  try {
    if (cfg.MIGRATE_ON_START) await migrateOrExit(client, MIGRATIONS_FOLDER);
    const db = createDatabase(client);
    return await fn({ db, writer: createWriter(db) });
  } finally {
    client.close();
  }
}

/** The subscriber named by --consumer; a missing or unknown name is a usage error. */
async function subscriberNamed(name: string | undefined): Promise<Subscriber> {
  if (!name) throw new UsageError('--consumer <name> is required');
  const [{ findSubscriber, UnknownSubscriberError }, { modules }] = await Promise.all([import('../compose/define-modules.ts'), import('../modules.ts')]);
  try {
    return findSubscriber(modules, name);
  } catch (error) {
    if (error instanceof UnknownSubscriberError) throw new UsageError(error.message);
    throw error;
  }
}

/** Opens a subscriber's database, write queue and inbox dependencies. */
async function withSubscriber<T>(subscriber: Subscriber, fn: (s: { db: Database; inbox: InboxDeps }) => Promise<T>): Promise<T> {
  const cfg = await config();
  const [{ openSubscriberDb }, { createDatabase }, { createWriter }, { createInboxDeps }, { registryOf }, { modules }, { createMetrics }, { createLogger }] =
    await Promise.all([
      import('./open-databases.ts'),
      import('../db/open-database.ts'),
      import('../db/writer.ts'),
      import('../inbox/handle-once.ts'),
      import('../compose/define-modules.ts'),
      import('../modules.ts'),
      import('../metrics/metrics.ts'),
      import('../logger.ts'),
    ]);
  const client = await openSubscriberDb(cfg, subscriber.name);
  try {
    const db = createDatabase(client);
    const inbox = createInboxDeps(subscriber, {
      writer: createWriter(db),
      registry: registryOf(modules),
      metrics: createMetrics(),
      maxDeliver: cfg.CONSUMER_MAX_DELIVER,
      // what a replayed event's handler logs goes to stderr: stdout is the command's own output
      log: createLogger(cfg.LOG_LEVEL, (line) => console.error(line), { service: cfg.SERVICE_NAME }),
    });
    return await fn({ db, inbox });
  } finally {
    client.close();
  }
}

const commands: Record<string, Command> = {
  'outbox:stats': async (argv) => {
    parseArgs(argv, { values: [] });
    const { readOutboxStats } = await import('../outbox/outbox-stats.ts');
    const stats = await withDatabase(({ db }) => readOutboxStats(db, new Date()));
    console.log(JSON.stringify(stats, null, 2));
  },
  'outbox:failed': async (argv) => {
    const { values } = parseArgs(argv, { values: ['limit'] });
    const limit = values.limit !== undefined ? parsePositiveInt(values.limit, 'limit', 10_000) : 100;
    const { listFailed } = await import('../outbox/failed-rows.ts');
    const rows = await withDatabase(({ db }) => listFailed(db, limit));
    if (rows.length === 0) console.log('no failed outbox rows');
    for (const r of rows) {
      console.log(
        `${r.id}  ${r.messageType}  ${r.aggregateType}/${r.aggregateId}  attempts=${r.attempts ?? '?'}  occurred=${r.occurredAt ?? '?'}\n    ${r.lastError ?? ''}`,
      );
    }
  },
  'outbox:retry-failed': async (argv) => {
    const { values, flags } = parseArgs(argv, { values: ['id'], flags: ['all'] });
    if (flags.has('all') === (values.id !== undefined)) throw new UsageError('give exactly one of --id <event id> or --all');
    const { requeueFailed } = await import('../outbox/failed-rows.ts');
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
    const given = values['older-than'] !== undefined ? parseDurationOption(values['older-than'], 'older-than') : undefined;
    const batch = batchOption(values);
    // sent rows are published: deleting them at any age breaks no guarantee, so there is no floor
    const cutoffMs = Date.now() - (given ?? (await config()).OUTBOX_RETENTION);
    const { compactOutbox } = await import('../outbox/compact-outbox.ts');
    const result = await withDatabase((d) =>
      compactOutbox(
        { ...d, clock: () => new Date() },
        { cutoffMs, ...(batch ? { batch } : {}), onBatch: (p) => console.log(`batch ${p.batches}: ${p.deleted} sent row(s) deleted so far`) },
      ),
    );
    console.log(`deleted ${result.deleted} sent row(s) older than ${new Date(cutoffMs).toISOString()} in ${result.batches} batch(es)`);
  },
  'idempotency:compact': async (argv) => {
    const { values, flags } = parseArgs(argv, { values: ['older-than', 'batch'], flags: ['force'] });
    const given = values['older-than'] !== undefined ? parseDurationOption(values['older-than'], 'older-than') : undefined;
    const batch = batchOption(values);
    const retention = (await config()).IDEMPOTENCY_RETENTION;
    const olderThanMs = given ?? retention;
    if (olderThanMs < retention && !flags.has('force')) {
      throw new RefusedError(
        `Refusing to forget Idempotency-Keys younger than IDEMPOTENCY_RETENTION (${formatDuration(retention)}): a client retrying one of those requests would run it twice. Pass --force to compact anyway.`,
      );
    }
    const { compactIdempotencyKeys } = await import('../http/idempotency-retention.ts');
    const result = await withDatabase(({ writer }) =>
      compactIdempotencyKeys(
        { writer, clock: () => new Date() },
        { olderThanMs, ...(batch ? { batch } : {}), onBatch: (p) => console.log(`batch ${p.batches}: ${p.deleted} key(s) deleted so far`) },
      ),
    );
    console.log(`deleted ${result.deleted} idempotency key(s) stored before ${new Date(result.cutoff).toISOString()} in ${result.batches} batch(es)`);
  },
  'inbox:dead-letters': async (argv) => {
    const { values } = parseArgs(argv, { values: ['consumer'] });
    const subscriber = await subscriberNamed(values.consumer);
    const { listDeadLetters } = await import('../inbox/dead-letters.ts');
    const letters = await withSubscriber(subscriber, ({ db }) => listDeadLetters(db, subscriber.name));
    if (letters.length === 0) console.log(`no dead letters for ${values.consumer}`);
    for (const d of letters) {
      console.log(
        `${d.eventId}  ${d.subject}  deliveries=${d.deliveries ?? '?'}  dead=${d.deadAt === null ? '?' : new Date(d.deadAt).toISOString()}\n    ${d.error}`,
      );
    }
  },
  'inbox:replay': async (argv) => {
    const { values, flags } = parseArgs(argv, { values: ['consumer', 'id'], flags: ['all'] });
    const subscriber = await subscriberNamed(values.consumer);
    if (flags.has('all') === (values.id !== undefined)) throw new UsageError('give exactly one of --id <event id> or --all');
    const { replayDeadLetters } = await import('../inbox/dead-letters.ts');
    const report = await withSubscriber(subscriber, ({ db, inbox }) => replayDeadLetters({ ...inbox, db }, values.id ?? 'all'));
    console.log(JSON.stringify(report, null, 2));
    if (report.failed.length > 0 || report.notFound.length > 0) process.exitCode = 1;
  },
  'inbox:compact': async (argv) => {
    const { values, flags } = parseArgs(argv, { values: ['consumer', 'older-than', 'batch'], flags: ['force'] });
    const subscriber = await subscriberNamed(values.consumer);
    const given = values['older-than'] !== undefined ? parseDurationOption(values['older-than'], 'older-than') : undefined;
    const batch = batchOption(values);
    const cfg = await config();
    const olderThanMs = given ?? cfg.INBOX_RETENTION_DAYS * 86_400_000;
    const { assertSafeRetention, compactInbox, retentionSettingsFrom, UnsafeRetentionError } = await import('../inbox/retention.ts');
    // the floor start-up applies: a copy of an event may still arrive while its inbox row is younger
    if (!flags.has('force')) {
      try {
        assertSafeRetention({ retentionMs: olderThanMs, ...retentionSettingsFrom(cfg) });
      } catch (error) {
        if (error instanceof UnsafeRetentionError) throw new RefusedError(`${error.message} Pass --force to compact anyway.`);
        throw error;
      }
    }
    const result = await withSubscriber(subscriber, ({ inbox }) =>
      compactInbox({ writer: inbox.writer, clock: () => new Date() }, { olderThanMs, ...(batch ? { batch } : {}) }),
    );
    console.log(
      `deleted ${result.deleted} inbox row(s) of ${subscriber.name} received before ${new Date(result.cutoff).toISOString()} in ${result.batches} batch(es)`,
    );
  },
  'db:vacuum': async (argv) => {
    const { values } = parseArgs(argv, { values: ['consumer'] });
    const subscriber = values.consumer !== undefined ? await subscriberNamed(values.consumer) : undefined;
    const cfg = await config();
    const { subscriberDatabaseUrl } = await import('../inbox/subscriber-database.ts');
    const url = subscriber ? subscriberDatabaseUrl(cfg.CONSUMER_DATABASE_URL_TEMPLATE, subscriber.name) : cfg.DATABASE_URL;
    if (!url.startsWith('file:')) throw new RefusedError(`db:vacuum works on a local database file only, not ${url.split(':')[0]}: URLs`);
    const [{ openClient }, { convertToIncrementalVacuum, NotLocalDatabaseError }] = await Promise.all([
      import('./open-databases.ts'),
      import('../ops/vacuum.ts'),
    ]);
    const client = await openClient(url, cfg);
    try {
      const report = await convertToIncrementalVacuum(client);
      const { before, after } = report;
      const mb = (pages: number, size: number) => `${((pages * size) / 1048576).toFixed(1)} MB`;
      if (!report.converted) console.log(`auto_vacuum is incremental already (${before.pageCount} pages, ${before.freelistCount} free): nothing to do`);
      else
        console.log(
          `auto_vacuum ${before.autoVacuum} → ${after.autoVacuum} in ${report.ms} ms; ${before.pageCount} → ${after.pageCount} pages (${mb(before.pageCount, before.pageSize)} → ${mb(after.pageCount, after.pageSize)}), ${before.freelistCount} → ${after.freelistCount} free`,
        );
    } catch (error) {
      if (error instanceof NotLocalDatabaseError) throw new RefusedError(error.message);
      throw error;
    } finally {
      client.close();
    }
  },
};

// what ends the process on a fatal error is installed once the command runs (it loads the logger)
const fatalErrorsInstalled = import('./fatal-errors.ts').then(({ exitOnFatalErrors }) => exitOnFatalErrors(() => process.exit(1)));

const [name, ...rest] = process.argv.slice(2);
const command = name && Object.hasOwn(commands, name) ? commands[name] : undefined;
try {
  if (!command) throw new UsageError(name ? `unknown command ${name}` : 'missing command');
  await fatalErrorsInstalled;
  await command(rest);
} catch (error) {
  if (error instanceof UsageError) {
    console.error(`${error.message}\n${USAGE}`);
    process.exit(2);
  }
  if (error instanceof RefusedError || (await import('../roles/start-up-refusals.ts')).isStartUpRefusal(error)) {
    console.error(error.message);
    process.exit(2);
  }
  console.error(`error: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
}
