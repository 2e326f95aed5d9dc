// `npm run relay [-- --time-limit 30s] [--max-messages N]`: the relay alone, for a supervisor or a container.
import { boot, stopOnSignals } from './boot.ts';
import { parseArgs, parseDuration, parsePositiveInt, UsageError } from './args.ts';
import { serveOnNode } from './serve-node.ts';

const USAGE = 'usage: npm run relay -- [--time-limit <duration, e.g. 30s>] [--max-messages <n>]';

let relayRun: { timeLimitMs?: number; maxMessages?: number };
try {
  const { values, positional } = parseArgs(process.argv.slice(2), { values: ['time-limit', 'max-messages'] });
  if (positional.length > 0) throw new UsageError(`unexpected argument ${positional[0]}`);
  relayRun = {
    ...(values['time-limit'] ? { timeLimitMs: parseDuration(values['time-limit'], 'time-limit') } : {}),
    ...(values['max-messages'] ? { maxMessages: parsePositiveInt(values['max-messages'], 'max-messages') } : {}),
  };
} catch (error) {
  if (!(error instanceof UsageError)) throw error;
  console.error(`${error.message}\n${USAGE}`);
  process.exit(2);
}

const started = await boot({ env: { ROLES: 'relay' }, relayRun });
stopOnSignals(started, serveOnNode(started));
