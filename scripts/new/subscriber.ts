// `npm run new -- subscriber <name> --on <type>[,<type>…]`: a subscriber with a starter table keeping each event's
// fields, its line in src/modules.ts, its migrations (npm run db:generate -- <name>) and its test.
import { existsSync } from 'node:fs';
import { UsageError } from '../../src/entry/args.ts';
import { loadEvents, subscriberNames } from './catalog.ts';
import { tsLiteral } from './literal.ts';
import { checkIdentifier, checkTable, declaredIn } from './identifiers.ts';
import { camel, KEBAB, pascal, snake } from './names.ts';
import { createPlan, readPlanned, type Plan } from './plan.ts';
import { columnsOf, jsonSchemaOf, sampleOf, type Column } from './samples.ts';
import { addImport, appendToList } from './source-edit.ts';

/** What `new subscriber` is asked for. */
export type SubscriberRequest = { name: string; on: string[]; table?: string };

/** Tables of a subscriber's database that the core owns. */
const RESERVED_TABLES = ['inbox', 'dead_letters', '__drizzle_migrations'];

/** The columns every starter table has, before the event's own fields. */
const FIXED = ['id', 'type', 'aggregateId', 'occurredAt'];

const BUILDER: Record<Column['kind'], (column: string) => string> = {
  text: (c) => `text('${c}')`,
  integer: (c) => `integer('${c}')`,
  real: (c) => `real('${c}')`,
  boolean: (c) => `integer('${c}', { mode: 'boolean' })`,
  json: (c) => `text('${c}', { mode: 'json' })`,
};

/** Checks the request against the service as it is; UsageError (exit 2) for anything wrong. */
function check(request: SubscriberRequest, modulesSource: string, known: string[]): void {
  if (!KEBAB.test(request.name)) throw new UsageError(`subscriber name ${JSON.stringify(request.name)} must be kebab-case (shipping, order-emails)`);
  if (subscriberNames().includes(request.name) || existsSync(`db/subscribers/${request.name}`))
    throw new UsageError(`subscriber ${request.name} exists already`);
  if (
    new RegExp(`\\b${camel(request.name)}\\b`).test(
      modulesSource
        .split('\n')
        .filter((l) => l.startsWith('import '))
        .join('\n'),
    )
  ) {
    throw new UsageError(`src/modules.ts already imports a value called ${camel(request.name)}; choose another subscriber name`);
  }
  if (request.on.length === 0) throw new UsageError('--on needs at least one event type');
  const unknown = request.on.filter((t) => !known.includes(t));
  if (unknown.length > 0)
    throw new UsageError(`unknown event type${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')}; registered: ${known.join(', ') || 'none'}`);
  const table = request.table ?? `${snake(request.name)}_records`;
  checkTable(table, RESERVED_TABLES, '--table');
  checkNames(request.name, table, modulesSource);
}

/** What the generated subscriber.ts imports or declares, and its test's own names (its locals among them). */
const SUBSCRIBER_FILE = ['asc', 'eq', 'Database', 'defineSubscriber', 'AppEvents', 'tx', 'e', 'db', 'aggregateId'];
const TEST_FILE = ['describe', 'expect', 'it', 'registryOf', 'APP_MIGRATIONS', 'IntegrationEvent', 'createInboxDeps', 'handleOnce'];
const TEST_LOCALS = ['InboxMessage', 'createMetrics', 'modules', 'createSubscriberDb', 'delivery', 'sdb', 'deps', 'event', 'attempt'];

/** Refuses a subscriber whose value, table or list function would not compile or would clash with each other. */
function checkNames(name: string, tableName: string, modulesSource: string): void {
  const value = camel(name);
  const table = camel(tableName);
  const list = `list${pascal(tableName)}`;
  const file = `src/subscribers/${name}/subscriber.ts`;
  checkIdentifier(value, `the subscriber in ${file}`, [...SUBSCRIBER_FILE, ...TEST_FILE, ...TEST_LOCALS, table, list, ...declaredIn(modulesSource)]);
  checkIdentifier(table, `the table of --table ${tableName} in src/subscribers/${name}/tables.ts`, [
    ...SUBSCRIBER_FILE,
    'index',
    'integer',
    'real',
    'sqliteTable',
    'text',
    list,
  ]);
  checkIdentifier(list, `the query in ${file}`, [...SUBSCRIBER_FILE, ...TEST_FILE, ...TEST_LOCALS]);
}

/** Plans the subscriber's files, its line in src/modules.ts and the generation of its migrations. */
export async function planSubscriber(request: SubscriberRequest): Promise<Plan> {
  const plan = createPlan();
  const modulesFile = 'src/modules.ts';
  const catalog = await loadEvents();
  check(request, readPlanned(plan, modulesFile), Object.keys(catalog));
  const on = [...new Set(request.on)];
  const name = request.name;
  const value = camel(name);
  const tableName = request.table ?? `${snake(name)}_records`;
  const table = camel(tableName);
  const dir = `src/subscribers/${name}`;
  const schemas = on.map((t) => jsonSchemaOf(catalog[t]!.data));
  // an event field named like a fixed column keeps its value under data<Field>
  const property = (field: string) => (FIXED.includes(field) ? `data${pascal(field)}` : field);
  const columns = columnsOf(schemas);
  const kinds = new Set(columns.map((c) => c.kind));

  plan.create.set(
    `${dir}/tables.ts`,
    [
      `import { ${['index', 'integer', ...(kinds.has('real') ? ['real'] : []), 'sqliteTable', 'text'].join(', ')} } from 'drizzle-orm/sqlite-core';`,
      ``,
      `/** One row per event the \`${name}\` subscriber applied; no unique key of its own: the inbox applies each event once. */`,
      `export const ${table} = sqliteTable(`,
      `  '${tableName}',`,
      `  {`,
      `    id: integer('id').primaryKey({ autoIncrement: true }),`,
      `    type: text('type').notNull(),`,
      `    aggregateId: text('aggregate_id').notNull(),`,
      `    occurredAt: integer('occurred_at').notNull(),`,
      ...columns.map((c) => `    ${property(c.field)}: ${BUILDER[c.kind](snake(property(c.field)))}${c.notNull ? '.notNull()' : ''},`),
      `  },`,
      `  (t) => [index('idx_${tableName}_aggregate').on(t.aggregateId)],`,
      `);`,
      ``,
    ].join('\n'),
  );

  const handlers = on.map((type, i) => {
    const fields = Object.keys(schemas[i]!.properties ?? {});
    const values = ['type: e.type', 'aggregateId: e.aggregateId', 'occurredAt: Date.parse(e.occurredAt)', ...fields.map((f) => `${property(f)}: e.data.${f}`)];
    return [`    '${type}': async (tx, e) => {`, `      await tx.insert(${table}).values({ ${values.join(', ')} }).run();`, `    },`].join('\n');
  });
  const list = `list${pascal(tableName)}`;
  plan.create.set(
    `${dir}/subscriber.ts`,
    [
      `import { asc, eq } from 'drizzle-orm';`,
      `import type { Database } from '../../db/open-database.ts';`,
      `import { defineSubscriber } from '../../inbox/subscriber.ts';`,
      `import type { AppEvents } from '../../modules.ts';`,
      `import { ${table} } from './tables.ts';`,
      ``,
      `/** The rows stored for the aggregate \`aggregateId\`, oldest first. */`,
      `export async function ${list}(db: Database, aggregateId: string) {`,
      `  return db.select().from(${table}).where(eq(${table}.aggregateId, aggregateId)).orderBy(asc(${table}.id));`,
      `}`,
      ``,
      `/** Keeps each ${on.map((t) => `\`${t}\``).join(', ')} as one row of \`${tableName}\`, in its own database, once per event. */`,
      `export const ${value} = defineSubscriber<AppEvents>()({`,
      `  name: '${name}',`,
      `  on: {`,
      ...handlers,
      `  },`,
      `});`,
      ``,
    ].join('\n'),
  );

  let modules = readPlanned(plan, modulesFile);
  modules = addImport(modules, [value], `./subscribers/${name}/subscriber.ts`);
  modules = appendToList(modules, 'subscribers: [', value, modulesFile);
  plan.edit.set(modulesFile, modules);
  plan.run.push(['npm', 'run', 'db:generate', '--', name]);

  const testFile = `test/subscribers/${name}.int.spec.ts`;
  const cases = on.map((type, i) => {
    const aggregate = catalog[type]!.aggregate;
    const data = sampleOf(schemas[i]!) as Record<string, unknown>;
    // the event's own id field names the aggregate the envelope names
    if (Object.hasOwn(data, `${camel(aggregate)}Id`)) data[`${camel(aggregate)}Id`] = `${aggregate}-1`;
    const parsed = catalog[type]!.data.safeParse(data);
    if (!parsed.success) console.warn(`warning: the example ${type} data in ${testFile} is not valid (${parsed.error.issues[0]?.message}); fill it in by hand`);
    const row = Object.fromEntries(Object.entries(data).map(([k, v]) => [property(k), v]));
    return [
      ``,
      `  it('applies ${type} once: one row, and a redelivery is a duplicate', async () => {`,
      `    await using sdb = await createSubscriberDb({ migrations: APP_MIGRATIONS.subscriber('${name}') });`,
      `    const deps = createInboxDeps(${value}, { writer: sdb.writer, registry: registryOf(modules), metrics: createMetrics() });`,
      `    const event = { eventId: 'evt-${i + 1}', type: '${type}', aggregateType: '${aggregate}', aggregateId: '${aggregate}-1', aggregateVersion: 1, occurredAt: '2026-01-01T00:00:00.000Z', data: ${tsLiteral(data)} };`,
      ``,
      `    expect(await handleOnce(deps, delivery(event, 1))).toEqual({ outcome: 'processed', eventId: event.eventId });`,
      `    expect(await handleOnce(deps, delivery(event, 2))).toEqual({ outcome: 'duplicate', eventId: event.eventId });`,
      `    expect(await ${list}(sdb.db, event.aggregateId)).toEqual([`,
      `      { id: 1, type: event.type, aggregateId: event.aggregateId, occurredAt: Date.parse(event.occurredAt), ${columns
        .map((c) => `${property(c.field)}: ${Object.hasOwn(row, property(c.field)) ? tsLiteral(row[property(c.field)]) : 'null'}`)
        .join(', ')} },`,
      `    ]);`,
      `  });`,
    ].join('\n');
  });
  plan.create.set(
    testFile,
    [
      `import { describe, expect, it } from 'vitest';`,
      `import { registryOf } from '../../src/compose/define-modules.ts';`,
      `import { APP_MIGRATIONS } from '../../src/entry/boot.ts';`,
      `import type { IntegrationEvent } from '../../src/events/integration-event.ts';`,
      `import { createInboxDeps, handleOnce } from '../../src/inbox/handle-once.ts';`,
      `import type { InboxMessage } from '../../src/inbox/inbox-message.ts';`,
      `import { createMetrics } from '../../src/metrics/metrics.ts';`,
      `import { modules } from '../../src/modules.ts';`,
      `import { ${list}, ${value} } from '../../src/subscribers/${name}/subscriber.ts';`,
      `import { createSubscriberDb } from '../support/consumer.ts';`,
      ``,
      `/** \`event\` as its \`attempt\`-th delivery from the stream, as the consumer runner hands it to the inbox. */`,
      `const delivery = (event: IntegrationEvent, attempt: number): InboxMessage => ({`,
      `  subject: \`events.\${event.aggregateType}.\${event.aggregateId}\`,`,
      `  headers: { 'Nats-Msg-Id': event.eventId },`,
      `  payload: JSON.stringify(event),`,
      `  deliveryCount: attempt,`,
      `  fallbackId: event.eventId,`,
      `});`,
      ``,
      `describe('${name} - applies its events once through the inbox', () => {${cases.join('\n')}`,
      `});`,
      ``,
    ].join('\n'),
  );
  plan.next.push(
    `shape ${dir}/tables.ts and the handlers in ${dir}/subscriber.ts to what ${name} needs, then npm run db:generate -- ${name} and adjust ${testFile}`,
  );
  return plan;
}
