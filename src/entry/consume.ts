// `npm run consume -- <name>`: one subscriber alone, for a supervisor or a container.
import { findSubscriber } from '../compose/define-modules.ts';
import { modules } from '../modules.ts';
import { isStartUpRefusal } from '../roles/start-up-refusals.ts';
import { parseArgs, UsageError } from './args.ts';
import { boot, stopOnSignals } from './boot.ts';
import { serveOnNode } from './serve-node.ts';

const USAGE = `usage: npm run consume -- <${modules.subscribers.map((s) => s.name).join('|')}>`;

let name: string;
try {
  const { positional } = parseArgs(process.argv.slice(2), { values: [], positional: 1 });
  if (positional.length === 0) throw new UsageError('missing subscriber name');
  name = positional[0]!;
  findSubscriber(modules, name);
} catch (error) {
  if (!(error instanceof UsageError || isStartUpRefusal(error))) throw error;
  console.error(`${error.message}\n${USAGE}`);
  process.exit(2);
}

const started = await boot({ env: { ROLES: 'consumers', CONSUMERS: name } });
stopOnSignals(started, serveOnNode(started));
