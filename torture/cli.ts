// npm run torture -- [--seed <n>] [--commands 500 --kills 6 --broker-restarts 1 --pauses 1 --rate 40 --concurrency 8 --backlog 20000 --lock-subscriber 12s --keep]
//   [--relays N] [--subscriber-instances M] [--cluster] [--lease-ttl 2s] [--partitions 16]
import { parseArgs, parseDurationOption, parsePositiveInt, UsageError } from '../src/entry/args.ts';
import { DELIVERY_BUDGET_MS, formatReport, runTorture, TORTURE_LEASE_TTL_MS, violationCount } from './run.ts';

const USAGE =
  'usage: npm run torture -- [--seed <n>] [--commands N] [--kills K] [--broker-restarts R] [--pauses P] [--rate per-second] [--concurrency C] [--backlog rows] [--lock-subscriber <duration>] [--relays N] [--subscriber-instances M] [--cluster] [--lease-ttl <duration>] [--partitions P] [--broken no-inbox|mark-before-puback] [--keep]\n' +
  '  --seed                  replays a run (its fault schedule and commands); without it a seed is drawn and printed\n' +
  '  --relays N              N relay processes sharing the outbox partitions through leases, each killed and restarted on the schedule\n' +
  '  --subscriber-instances M  M processes per subscriber with CONSUMER_PARTITIONED=true (one durable per partition, leased)\n' +
  '  --cluster               a three-node JetStream cluster, the stream at three replicas; broker restarts kill -9 one node, the stream leader first\n' +
  `  --lease-ttl             RELAY_LEASE_TTL_MS of the relays and subscribers (default ${TORTURE_LEASE_TTL_MS / 1000}s); --partitions: OUTBOX_PARTITIONS (default 16)`;

let options: Parameters<typeof runTorture>[0];
try {
  const { values, flags, positional } = parseArgs(process.argv.slice(2), {
    values: [
      'seed',
      'commands',
      'kills',
      'broker-restarts',
      'pauses',
      'rate',
      'concurrency',
      'backlog',
      'lock-subscriber',
      'broken',
      'relays',
      'subscriber-instances',
      'lease-ttl',
      'partitions',
    ],
    flags: ['keep', 'cluster'],
  });
  if (positional.length) throw new UsageError(`unexpected argument ${positional[0]}`);
  const count = (name: string, fallback: number) => (values[name] === undefined ? fallback : values[name] === '0' ? 0 : parsePositiveInt(values[name]!, name));
  if (values.broken !== undefined && values.broken !== 'no-inbox' && values.broken !== 'mark-before-puback')
    throw new UsageError('--broken must be no-inbox or mark-before-puback');
  const seed = values.seed === undefined ? 1 + Math.floor(Math.random() * 1_000_000) : count('seed', 1);
  if (values.seed === undefined) console.error(`torture: no --seed given, drew seed ${seed} (replay with --seed ${seed})`);
  options = {
    seed,
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
    ...(values.relays !== undefined ? { relays: parsePositiveInt(values.relays, 'relays', 16) } : {}),
    ...(values['subscriber-instances'] !== undefined
      ? { subscriberInstances: parsePositiveInt(values['subscriber-instances'], 'subscriber-instances', 16) }
      : {}),
    ...(values['lease-ttl'] !== undefined ? { leaseTtlMs: parseDurationOption(values['lease-ttl'], 'lease-ttl', { min: 300, max: 600_000 }) } : {}),
    ...(values.partitions !== undefined ? { partitions: parsePositiveInt(values.partitions, 'partitions', 1024) } : {}),
    cluster: flags.has('cluster'),
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
