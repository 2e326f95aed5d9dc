// `npm run relay [-- --time-limit 30s] [--max-messages N]`: the relay alone, for a supervisor or a container.
// The command line is checked before the rest of the service is loaded: a bad one is answered at once.
import { parseArgs, parseDurationOption, parsePositiveInt, UsageError } from './args.ts';

const USAGE = 'usage: npm run relay -- [--time-limit <duration up to 24d, e.g. 30s>] [--max-messages <n>]';

/** A time limit is one timer, and timers cannot wait longer than 2^31 - 1 ms (about 24.8 days). */
const MAX_TIME_LIMIT_MS = 24 * 86_400_000;

let relayRun: { timeLimitMs?: number; maxMessages?: number };
try {
  const { values } = parseArgs(process.argv.slice(2), { values: ['time-limit', 'max-messages'] });
  relayRun = {
    ...(values['time-limit'] !== undefined ? { timeLimitMs: parseDurationOption(values['time-limit'], 'time-limit', { min: 1, max: MAX_TIME_LIMIT_MS }) } : {}),
    ...(values['max-messages'] !== undefined ? { maxMessages: parsePositiveInt(values['max-messages'], 'max-messages') } : {}),
  };
} catch (error) {
  if (!(error instanceof UsageError)) throw error;
  console.error(`${error.message}\n${USAGE}`);
  process.exit(2);
}

const [{ boot, stopOnSignals }, { serveOnNode }] = await Promise.all([import('./boot.ts'), import('./serve-node.ts')]);
const started = await boot({ env: { ROLES: 'relay' }, relayRun });
stopOnSignals(started, serveOnNode(started));
