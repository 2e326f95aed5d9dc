// npm run torture -- --seed <n> [--commands 500 --kills 6 --broker-restarts 1 --pauses 1 --rate 40 --concurrency 8 --backlog 20000 --lock-subscriber 12s --keep]
import { parseArgs, parseDurationOption, parsePositiveInt, UsageError } from '../src/entry/args.ts';
import { DELIVERY_BUDGET_MS, formatReport, runTorture, violationCount } from './run.ts';

const USAGE =
  'usage: npm run torture -- --seed <n> [--commands N] [--kills K] [--broker-restarts R] [--pauses P] [--rate per-second] [--concurrency C] [--backlog rows] [--lock-subscriber <duration>] [--broken no-inbox|mark-before-puback] [--keep]';

let options: Parameters<typeof runTorture>[0];
try {
  const { values, flags, positional } = parseArgs(process.argv.slice(2), {
    values: ['seed', 'commands', 'kills', 'broker-restarts', 'pauses', 'rate', 'concurrency', 'backlog', 'lock-subscriber', 'broken'],
    flags: ['keep'],
  });
  if (positional.length) throw new UsageError(`unexpected argument ${positional[0]}`);
  if (values.seed === undefined) throw new UsageError('--seed is required (it makes the fault schedule replayable)');
  const count = (name: string, fallback: number) => (values[name] === undefined ? fallback : values[name] === '0' ? 0 : parsePositiveInt(values[name]!, name));
  if (values.broken !== undefined && values.broken !== 'no-inbox' && values.broken !== 'mark-before-puback')
    throw new UsageError('--broken must be no-inbox or mark-before-puback');
  options = {
    seed: count('seed', 1),
    commands: count('commands', 500),
    kills: count('kills', 6),
    brokerRestarts: count('broker-restarts', 1),
    pauses: count('pauses', 1),
    rate: count('rate', 40),
    concurrency: count('concurrency', 8),
    backlog: count('backlog', 20_000),
    lockSubscriberMs:
      values['lock-subscriber'] === undefined
        ? DELIVERY_BUDGET_MS + 3000
        : values['lock-subscriber'] === '0'
          ? 0
          : parseDurationOption(values['lock-subscriber'], 'lock-subscriber'),
    ...(values.broken ? { broken: values.broken as 'no-inbox' | 'mark-before-puback' } : {}),
    keep: flags.has('keep'),
  };
} catch (error) {
  if (!(error instanceof UsageError)) throw error;
  console.error(`${error.message}\n${USAGE}`);
  process.exit(2);
}

const result = await runTorture(options);
console.log(formatReport(result));
if (options.keep) console.log(`files kept in ${result.dir}`);
const bad = violationCount(result);
console.log(bad === 0 ? `torture seed ${result.seed}: PASS` : `torture seed ${result.seed}: FAIL (${bad} violations; replay with --seed ${result.seed})`);
process.exit(bad === 0 ? 0 : 1);
