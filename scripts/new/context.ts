// `npm run new -- context <name>`: a context folder (context.ts, events.ts, tables.ts, routes.ts), its entries in
// src/modules.ts and the migration of its starter table.
import { UsageError } from '../../src/entry/args.ts';
import { contextNames } from './catalog.ts';
import { checkIdentifier, checkTable, declaredIn } from './identifiers.ts';
import { camel, KEBAB, pascal, singular, snake } from './names.ts';
import { createPlan, readPlanned, type Plan } from './plan.ts';
import { addImport, appendToList } from './source-edit.ts';

/** Tables of the service database that the core owns. */
const RESERVED_TABLES = ['outbox', 'idempotency_keys', '__drizzle_migrations'];

/** Plans the context's four files, its entries in src/modules.ts and `npm run db:generate -- service`. */
export function planContext(name: string): Plan {
  if (!KEBAB.test(name)) throw new UsageError(`context name ${JSON.stringify(name)} must be kebab-case and plural (invoices, stock-items)`);
  if (contextNames().includes(name)) throw new UsageError(`context ${name} exists already`);
  const table = snake(name);
  if (RESERVED_TABLES.includes(table)) throw new UsageError(`a context called ${name} would own the core's table ${table}; choose another name`);
  checkTable(table, RESERVED_TABLES, 'its table');
  const plan = createPlan();
  const modulesFile = 'src/modules.ts';
  let modules = readPlanned(plan, modulesFile);
  const value = camel(name);
  if (
    new RegExp(`\\b${value}\\b`).test(
      modules
        .split('\n')
        .filter((l) => l.startsWith('import '))
        .join('\n'),
    )
  ) {
    throw new UsageError(`src/modules.ts already imports a value called ${value}; choose another context name`);
  }
  const aggregate = singular(name);
  const events = `${camel(aggregate)}Events`;
  const routes = `create${pascal(aggregate)}Routes`;
  const dir = `src/contexts/${name}`;
  checkIdentifier(value, `the context in ${dir}/context.ts`, ['defineContext', events, routes, ...declaredIn(modules)]);
  checkIdentifier(events, `the events in ${dir}/events.ts`, ['defineEvents']);
  checkIdentifier(routes, `the routes in ${dir}/routes.ts`, ['Hono', 'Deps', 'deps']);
  checkIdentifier(camel(table), `the table in ${dir}/tables.ts`, ['integer', 'sqliteTable', 'text']);

  plan.create.set(
    `${dir}/context.ts`,
    [
      `import { defineContext } from '../../http/define-context.ts';`,
      `import { ${events} } from './events.ts';`,
      `import { ${routes} } from './routes.ts';`,
      ``,
      `/** The ${name} context: its commands over HTTP at /${name} and the events they publish. */`,
      `export const ${value} = defineContext({ name: '${name}', basePath: '/${name}', events: ${events}, routes: ${routes} });`,
      ``,
    ].join('\n'),
  );
  plan.create.set(
    `${dir}/events.ts`,
    [
      `import { defineEvents } from '../../events/define-events.ts';`,
      ``,
      `/** The events the ${name} context publishes, of aggregate \`${aggregate}\` (\`npm run new -- command <name> --context ${name}\` adds one). */`,
      `export const ${events} = defineEvents({});`,
      ``,
    ].join('\n'),
  );
  plan.create.set(
    `${dir}/tables.ts`,
    [
      `import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core';`,
      ``,
      `/** Current state of each ${aggregate}; \`version\` is bumped by every event and becomes its aggregateVersion. */`,
      `export const ${camel(table)} = sqliteTable('${table}', {`,
      `  id: text('id').primaryKey(),`,
      `  version: integer('version').notNull(),`,
      `});`,
      ``,
    ].join('\n'),
  );
  plan.create.set(
    `${dir}/routes.ts`,
    [
      `import { Hono } from 'hono';`,
      `import type { Deps } from '../../deps.ts';`,
      ``,
      `/** The ${name} context's HTTP routes, mounted at /${name}: one line per command, queries beside them. */`,
      `export function ${routes}(deps: Deps) {`,
      `  return new Hono();`,
      `}`,
      ``,
    ].join('\n'),
  );

  modules = addImport(modules, [value], `./contexts/${name}/context.ts`);
  modules = appendToList(modules, 'defineEvents({', `...${value}.events`, modulesFile);
  modules = appendToList(modules, 'contexts: [', value, modulesFile);
  plan.edit.set(modulesFile, modules);
  plan.run.push(['npm', 'run', 'db:generate', '--', 'service']);
  plan.next.push(`add its first command: npm run new -- command <name> --context ${name} --create --fields …`);
  return plan;
}
