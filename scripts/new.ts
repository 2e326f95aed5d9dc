// `npm run new -- <kind> …`: scaffolds that extend the service in the house style (see README, "Make it yours").
// A bad command line prints the usage and exits 2 having changed nothing; every file is checked before any is written.
import { parseArgs, UsageError } from '../src/entry/args.ts';
import { planCommand, planEvent } from './new/command.ts';
import { planContext } from './new/context.ts';
import { parseFields } from './new/fields.ts';
import { applyPlan, checkPlan, type Plan } from './new/plan.ts';
import { planRename } from './new/rename.ts';
import { EditError } from './new/source-edit.ts';
import { planSubscriber } from './new/subscriber.ts';

const USAGE = `usage: npm run new -- <kind> …
  command <name> --context <context> [--fields <f>[?]:<type>,…] [--create] [--event <type>] [--aggregate <type>]
      a handler src/contexts/<context>/<name>-<aggregate>.ts, its route in routes.ts (POST /<context>/:id/<name>,
      or POST /<context> with --create), its event in events.ts (<aggregate>.<name, past tense>.v1 unless --event)
      and a test test/contexts/<context>/<name>.int.spec.ts; field types: string, int, number, boolean
  event <type> --context <context> [--fields …] [--aggregate <type>]
      only the event: its schema and catalog entry in src/contexts/<context>/events.ts
  subscriber <name> --on <type>[,<type>…] [--table <table>]
      src/subscribers/<name>/{subscriber.ts,tables.ts} with a table keeping the events' fields, its line in
      src/modules.ts, its migrations (npm run db:generate -- <name>) and a test test/subscribers/<name>.int.spec.ts
  context <name>
      src/contexts/<name>/{context.ts,events.ts,tables.ts,routes.ts}, its lines in src/modules.ts, its migration
  rename <service-name>
      the service's name (DEFAULT_SERVICE_NAME in src/service-name.ts) in every file that spells it: package.json,
      package-lock.json, wrangler.toml, compose.yaml, the docs, the tests asserting the default stream and consumers;
      refused while the current name also spells a route, a path, a table or a value (an ordinary word such as orders)
names are kebab-case (ship, add-line, acme-shipping)`;

/** Parses the command line into the plan of one scaffold; UsageError for anything wrong. */
async function plan(argv: string[]): Promise<Plan> {
  const [kind, ...rest] = argv;
  const positional = (args: { positional: string[] }, what: string) => {
    const [value] = args.positional;
    if (value === undefined) throw new UsageError(`${kind} needs a ${what}`);
    return value;
  };
  const required = (args: { values: Record<string, string> }, option: string) => {
    const value = args.values[option];
    if (value === undefined) throw new UsageError(`${kind} needs --${option}`);
    return value;
  };
  switch (kind) {
    case 'command': {
      const args = parseArgs(rest, { values: ['context', 'fields', 'event', 'aggregate'], flags: ['create'], positional: 1 });
      return planCommand({
        name: positional(args, 'name'),
        context: required(args, 'context'),
        fields: parseFields(args.values.fields),
        create: args.flags.has('create'),
        ...(args.values.event !== undefined ? { event: args.values.event } : {}),
        ...(args.values.aggregate !== undefined ? { aggregate: args.values.aggregate } : {}),
      });
    }
    case 'event': {
      const args = parseArgs(rest, { values: ['context', 'fields', 'aggregate'], positional: 1 });
      return planEvent({
        type: positional(args, 'event type'),
        context: required(args, 'context'),
        fields: parseFields(args.values.fields),
        ...(args.values.aggregate !== undefined ? { aggregate: args.values.aggregate } : {}),
      });
    }
    case 'subscriber': {
      const args = parseArgs(rest, { values: ['on', 'table'], positional: 1 });
      return planSubscriber({
        name: positional(args, 'name'),
        on: required(args, 'on')
          .split(',')
          .map((t) => t.trim())
          .filter(Boolean),
        ...(args.values.table !== undefined ? { table: args.values.table } : {}),
      });
    }
    case 'context':
      return planContext(positional(parseArgs(rest, { values: [], positional: 1 }), 'name'));
    case 'rename':
      return planRename(positional(parseArgs(rest, { values: [], positional: 1 }), 'service name'));
    case undefined:
      throw new UsageError('which kind? command, event, subscriber, context or rename');
    default:
      throw new UsageError(`unknown kind ${JSON.stringify(kind)}; known: command, event, subscriber, context, rename`);
  }
}

const argv = process.argv.slice(2);
if (argv.length === 1 && ['--help', '-h', 'help'].includes(argv[0]!)) {
  console.log(USAGE);
  process.exit(0);
}
try {
  const planned = await plan(argv);
  planned.run.push(['npm', 'run', '--silent', 'docs:asyncapi']); // every scaffold changes the events, subscribers or name it describes
  checkPlan(planned);
  process.exitCode = applyPlan(planned);
} catch (error) {
  if (error instanceof UsageError) {
    console.error(`${error.message}\n\n${USAGE}`);
    process.exitCode = 2;
  } else if (error instanceof EditError) {
    console.error(`${error.message}; nothing was changed`);
    process.exitCode = 1;
  } else throw error;
}
