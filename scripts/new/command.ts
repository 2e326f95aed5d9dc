// `npm run new -- command <name> --context <context>` and `npm run new -- event <type> --context <context>`: an
// event in the context's catalog, and for a command its handler file, its route line and its test.
import { UsageError } from '../../src/entry/args.ts';
import type { Context } from '../../src/http/define-context.ts';
import { loadContext, loadEvents } from './catalog.ts';
import { objectLiteral, sampleOfField, zodOf, type Field } from './fields.ts';
import { checkIdentifier, declaredIn } from './identifiers.ts';
import { tsLiteral } from './literal.ts';
import { camel, EVENT_TYPE, eventTypeOf, kebab, KEBAB, pascal, singular } from './names.ts';
import { createPlan, readPlanned, type Plan } from './plan.ts';
import { addImport, appendToList, EditError, insertBeforeDeclaration } from './source-edit.ts';

/** What `new command` is asked for. */
export type CommandRequest = { name: string; context: string; fields: Field[]; create: boolean; event?: string; aggregate?: string };

/** What `new event` is asked for. */
export type EventRequest = { type: string; context: string; fields: Field[]; aggregate?: string };

/** The aggregate type a context's events belong to: `--aggregate`, else the one its events share, else its singular name. */
function aggregateOf(context: Context, asked: string | undefined): string {
  if (asked !== undefined) {
    if (!KEBAB.test(asked)) throw new UsageError(`--aggregate must be kebab-case (got ${JSON.stringify(asked)})`);
    return asked;
  }
  const known = [...new Set(Object.values(context.events).map((e) => e.aggregate))];
  if (known.length > 1) throw new UsageError(`context ${context.name} publishes events of ${known.join(', ')}; say which with --aggregate`);
  return known[0] ?? singular(context.name);
}

/** The one aggregate type the context's events belong to now, if they share one. */
function sharedAggregate(context: Context): string | undefined {
  const known = [...new Set(Object.values(context.events).map((e) => e.aggregate))];
  return known.length === 1 ? known[0] : undefined;
}

/** Refuses an event type that is malformed or already in the catalog. */
async function checkNewType(type: string): Promise<void> {
  if (!EVENT_TYPE.test(type))
    throw new UsageError(`event type ${JSON.stringify(type)} must look like order.shipped.v1 (lower case, dot-separated, ending in .v<n>)`);
  const catalog = await loadEvents();
  if (Object.hasOwn(catalog, type)) throw new UsageError(`event type ${type} is already registered; publish a new version (.v2) instead of changing it`);
}

/**
 * Adds the schema of `type` (the aggregate's id plus `fields`) and its catalog entry to the context's events.ts;
 * returns the schema's name (also the name of its data type).
 */
function addEvent(plan: Plan, dir: string, type: string, aggregate: string, fields: Field[], shared: string | undefined): string {
  const file = `${dir}/events.ts`;
  const idField = `${camel(aggregate)}Id`;
  if (fields.some((f) => f.name === idField)) throw new UsageError(`--fields: ${idField} is the event's aggregate id already`);
  const schema = pascal(type);
  let source = readPlanned(plan, file);
  checkIdentifier(schema, `the schema of ${type} in ${file}`, declaredIn(source));
  const existing = [...source.matchAll(/aggregate:\s*([A-Za-z_$][\w$]*|'[^']*')/g)].map((m) => m[1]!);
  // the expression the catalog already uses (e.g. ORDER_AGGREGATE) only when it names this very aggregate
  const reuse = aggregate === shared && existing.length > 0 && existing.every((e) => e === existing[0]);
  const aggregateExpr = reuse ? existing[0]! : `'${aggregate}'`;
  const shape = objectLiteral([[idField, 'safeText().min(1)'], ...fields.map((f): [string, string] => [f.name, zodOf(f)])]);
  const block = [
    `/** Data of \`${type}\`. Published contract: change it only by adding a \`.v${Number(/\.v(\d+)$/.exec(type)![1]) + 1}\`. */`,
    `export const ${schema} = z.strictObject(${shape});`,
    `export type ${schema} = z.output<typeof ${schema}>;`,
  ].join('\n');
  source = insertBeforeDeclaration(source, /=\s*defineEvents\(\{/, block, file);
  source = appendToList(source, 'defineEvents({', `'${type}': { aggregate: ${aggregateExpr}, data: ${schema} }`, file);
  source = addImport(source, ['z'], 'zod');
  source = addImport(source, ['safeText'], '../../events/safe-text.ts');
  plan.edit.set(file, source);
  return schema;
}

/** Plans `new event <type> --context <context>`: the schema and the catalog entry, nothing else. */
export async function planEvent(request: EventRequest): Promise<Plan> {
  const context = await loadContext(request.context);
  await checkNewType(request.type);
  const plan = createPlan();
  addEvent(plan, `src/contexts/${request.context}`, request.type, aggregateOf(context, request.aggregate), request.fields, sharedAggregate(context));
  plan.next.push(
    `publish it from a command: await cmd.emit([{ …, type: '${request.type}', data }])`,
    'subscribe to it: npm run new -- subscriber <name> --on ' + request.type,
  );
  return plan;
}

/** Adds `.post(path, ...commandRoute(deps, Body, handler))` to the context's route chain, with its imports. */
function addRoute(plan: Plan, dir: string, line: (deps: string) => string, imports: { names: string[]; from: string }): void {
  const file = `${dir}/routes.ts`;
  let source = readPlanned(plan, file);
  const deps = /function \w+\((\w+): Deps/.exec(source)?.[1] ?? 'deps';
  const lines = source.split('\n');
  let at = lines.findLastIndex((l) => l.includes('...commandRoute('));
  let indent: string;
  if (at >= 0) indent = /^\s*/.exec(lines[at]!)![0];
  else {
    at = lines.findIndex((l) => /new Hono(<[^>]*>)?\(\)/.test(l));
    if (at < 0) throw new EditError(`${file}: cannot find the route chain (new Hono() … .post(…)); add the route by hand: ${line(deps)}`);
    indent = `${/^\s*/.exec(lines[at]!)![0]}  `;
  }
  const ends = lines[at]!.trimEnd().endsWith(';');
  if (ends) lines[at] = lines[at]!.trimEnd().slice(0, -1);
  lines.splice(at + 1, 0, `${indent}${line(deps)}${ends ? ';' : ''}`);
  source = addImport(lines.join('\n'), imports.names, imports.from);
  source = addImport(source, ['commandRoute'], '../../http/command-route.ts');
  plan.edit.set(file, source);
}

/** Plans `new command <name> --context <context>`: event, handler, route line and test. */
export async function planCommand(request: CommandRequest): Promise<Plan> {
  if (!KEBAB.test(request.name)) throw new UsageError(`command name ${JSON.stringify(request.name)} must be kebab-case (ship, add-line)`);
  const context = await loadContext(request.context);
  const aggregate = aggregateOf(context, request.aggregate);
  const type = request.event ?? eventTypeOf(request.name, aggregate);
  await checkNewType(type);

  const plan = createPlan();
  const dir = `src/contexts/${request.context}`;
  const schema = addEvent(plan, dir, type, aggregate, request.fields, sharedAggregate(context));
  const base = request.name === kebab(aggregate) || request.name.endsWith(`-${kebab(aggregate)}`) ? request.name : `${request.name}-${kebab(aggregate)}`;
  const handler = camel(base);
  const bodySchema = `${pascal(base)}Body`;
  const idVar = `${camel(aggregate)}Id`;
  const handlerImports = ['z', 'Tx', 'safeText', 'ok', 'created', 'Command', 'CommandOutcome', 'data', 'body', 'cmd', 'tx', schema];
  checkIdentifier(handler, `the handler in ${dir}/${base}.ts`, [...handlerImports, bodySchema, idVar, ...declaredIn(readPlanned(plan, `${dir}/routes.ts`))]);
  checkIdentifier(bodySchema, `the body schema in ${dir}/${base}.ts`, [...handlerImports, ...declaredIn(readPlanned(plan, `${dir}/routes.ts`))]);
  checkIdentifier(idVar, `the id variable in ${dir}/${base}.ts`, handlerImports);
  const path = request.create ? '/' : `/:id/${request.name}`;
  const fullPath = `${context.basePath}${request.create ? '' : path}`;
  const emptyBody = request.fields.every((f) => f.optional);
  addRoute(plan, dir, (deps) => `.post('${path}', ...commandRoute(${deps}, ${bodySchema}, ${handler}${emptyBody ? ', { emptyBody: true }' : ''}))`, {
    names: [bodySchema, handler],
    from: `./${base}.ts`,
  });

  const strings = request.fields.some((f) => f.type === 'string');
  const outcome = request.create ? 'created' : 'ok';
  const emit = `{ eventId: cmd.newId(), type: '${type}', aggregateType: '${aggregate}', aggregateId: ${idVar}, aggregateVersion: 1, occurredAt: cmd.now.toISOString(), data }`;
  plan.create.set(
    `${dir}/${base}.ts`,
    [
      `import { z } from 'zod';`,
      `import type { Tx } from '../../db/open-database.ts';`,
      ...(strings ? [`import { safeText } from '../../events/safe-text.ts';`] : []),
      `import { ${outcome}, type Command, type CommandOutcome } from '../../http/command-route.ts';`,
      `import type { ${schema} } from './events.ts';`,
      ``,
      `/** Body of \`POST ${fullPath}\`. */`,
      `export const ${bodySchema} = z.strictObject(${objectLiteral(request.fields.map((f) => [f.name, zodOf(f)]))});`,
      ``,
      request.create
        ? `/** \`${request.name}\`: a new ${aggregate} and its \`${type}\` event in the caller's write transaction. */`
        : `/** \`${request.name}\` on the ${aggregate} \`cmd.params.id\`: its new state and its \`${type}\` event in the caller's write transaction. */`,
      `export async function ${handler}(tx: Tx, body: z.output<typeof ${bodySchema}>, cmd: Command): Promise<CommandOutcome> {`,
      request.create ? `  const ${idVar} = cmd.newId();` : `  const ${idVar} = cmd.params.id!;`,
      request.create
        ? `  // Store the new ${aggregate} through \`tx\` here: the event below commits with it or not at all.`
        : `  // Load the ${aggregate} through \`tx\`, decide and store its new state here; return a refusal as a value\n  // (\`return refuse(new NotFoundError(…))\`). The event below commits with that state or not at all.`,
      `  const data: ${schema} = { ${idVar}, ...body };`,
      `  // aggregateVersion: the ${aggregate}'s version once this command is applied.`,
      `  await cmd.emit([${emit}]);`,
      request.create ? `  return created(\`${context.basePath}/\${${idVar}}\`, data);` : `  return ok(data);`,
      `}`,
      ``,
    ].join('\n'),
  );

  const testFile = `test/contexts/${request.context}/${request.name}.int.spec.ts`;
  const sample = Object.fromEntries(request.fields.filter((f) => !f.optional).map((f) => [f.name, sampleOfField(f)]));
  const required = request.fields.some((f) => !f.optional);
  const target = request.create ? context.basePath : `${context.basePath}/${aggregate}-1/${request.name}`;
  plan.create.set(
    testFile,
    [
      `import { describe, expect, it } from 'vitest';`,
      `import { APP_MIGRATIONS } from '../../../src/entry/boot.ts';`,
      `import { modules } from '../../../src/modules.ts';`,
      `import { ${required ? 'countRows, ' : ''}createTestApp } from '../../support/db.ts';`,
      `import { ${required ? 'expectProblem, ' : ''}postJson } from '../../support/http.ts';`,
      ``,
      `/** The service's own app (its contexts and migrations) over a fresh database. */`,
      `const createServiceApp = () => createTestApp({ modules, migrations: APP_MIGRATIONS.service });`,
      ``,
      `/** A valid body of POST ${fullPath}. */`,
      `const body = ${tsLiteral(sample)};`,
      ``,
      `describe('${request.context} - ${request.name}', () => {`,
      `  it('answers ${request.create ? 201 : 200} and stores one ${type} outbox row carrying the body', async () => {`,
      `    await using t = await createServiceApp();`,
      `    const res = await postJson(t.app, '${target}', body);`,
      `    expect(res.status).toBe(${request.create ? 201 : 200});`,
      ...(request.create
        ? [
            `    const { ${idVar} } = (await res.json()) as { ${idVar}: string };`,
            `    expect(res.headers.get('location')).toBe(\`${context.basePath}/\${${idVar}}\`);`,
          ]
        : [`    const ${idVar} = '${aggregate}-1';`]),
      `    const { rows } = await t.client.execute('SELECT message_type, aggregate_id, payload FROM outbox');`,
      `    expect(rows).toHaveLength(1);`,
      `    expect(rows[0]).toMatchObject({ message_type: '${type}', aggregate_id: ${idVar} });`,
      `    expect(JSON.parse(String(rows[0]!.payload)).data).toEqual({ ${idVar}, ...body });`,
      `  });`,
      ...(required
        ? [
            ``,
            `  it('refuses a body without its required fields with 400 and stores nothing', async () => {`,
            `    await using t = await createServiceApp();`,
            `    await expectProblem(await postJson(t.app, '${target}', {}), 400);`,
            `    expect(await countRows(t.client, 'outbox')).toBe(0);`,
            `  });`,
          ]
        : []),
      `});`,
      ``,
    ].join('\n'),
  );
  plan.next.push(
    `fill in ${dir}/${base}.ts (load, decide, store) and its test ${testFile}`,
    `subscribe to ${type}: npm run new -- subscriber <name> --on ${type}`,
  );
  return plan;
}
