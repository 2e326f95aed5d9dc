// `npm run consume -- <name>`: one subscriber alone, for a supervisor or a container.
// The command line is checked before the rest of the service is loaded: a bad one is answered at once.
import { findSubscriber, UnknownSubscriberError } from '../compose/define-modules.ts';
import { modules } from '../modules.ts';
import { parseArgs, UsageError } from './args.ts';

const USAGE = `usage: npm run consume -- <${modules.subscribers.map((s) => s.name).join('|')}>`;

let name: string;
try {
  const { positional } = parseArgs(process.argv.slice(2), { values: [], positional: 1 });
  if (positional.length === 0) throw new UsageError('missing subscriber name');
  name = positional[0]!;
  findSubscriber(modules, name);
} catch (error) {
  if (!(error instanceof UsageError || error instanceof UnknownSubscriberError)) throw error;
  console.error(`${error.message}\n${USAGE}`);
  process.exit(2);
}

const [{ boot, stopOnSignals }, { serveOnNode }] = await Promise.all([import('./boot.ts'), import('./serve-node.ts')]);
const started = await boot({ env: { ROLES: 'consumers', CONSUMERS: name } });
stopOnSignals(started, serveOnNode(started));
