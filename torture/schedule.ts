import { createRandom } from '../test/support/random.ts';

/** The fixture service's kinds of process: its API, its relay and its two subscribers. */
export type ProcessName = 'api' | 'relay' | 'balances' | 'audit';
/**
 * A kill or a pause hits one process of its kind: `instance` (0-based) among the kind's processes (several relays,
 * several instances of a subscriber); 0 when the kind runs one process.
 */
export type Fault =
  | { at: number; kind: 'kill'; target: ProcessName; instance: number; restartAfterMs: number }
  | { at: number; kind: 'pause'; target: ProcessName; instance: number; forMs: number }
  | { at: number; kind: 'broker-restart'; downForMs: number };

export type ScheduleOptions = {
  seed: number;
  commands: number;
  kills: number;
  brokerRestarts: number;
  pauses: number;
  pauseMs: number;
  /** Processes per kind (default 1 each): kills and pauses of a kind go round the kind's processes. */
  instances?: Partial<Record<ProcessName, number>>;
};

const TARGETS: readonly ProcessName[] = ['api', 'relay', 'balances', 'audit'];

/**
 * The fault schedule of a run, as positions in the command stream (fault i happens once `at` commands were
 * sent). Derived from the seed alone: the same options give the same schedule. Kills cycle through every
 * process kind first, so a small run still hits each of them; the faults of one kind then go round its processes
 * (starting at one the seed picks), so each relay and each subscriber instance is hit once there are enough of
 * them. The instances take no draws from the seeded sequence: a run with one process per kind keeps the schedule
 * it had before there were several.
 */
export function buildSchedule(o: ScheduleOptions): Fault[] {
  const rnd = createRandom(o.seed);
  const faults: Fault[] = [];
  const hits = new Map<ProcessName, number>();
  const instanceOf = (target: ProcessName) => {
    const n = Math.max(1, o.instances?.[target] ?? 1);
    const k = hits.get(target) ?? 0;
    hits.set(target, k + 1);
    return (k + o.seed) % n;
  };
  const at = () => rnd.int(Math.floor(o.commands * 0.05), Math.floor(o.commands * 0.9));
  for (let i = 0; i < o.kills; i++) {
    const target = i < TARGETS.length ? TARGETS[(i + o.seed) % TARGETS.length]! : rnd.pick(TARGETS);
    faults.push({ at: at(), kind: 'kill', target, instance: instanceOf(target), restartAfterMs: rnd.int(50, 1500) });
  }
  for (let i = 0; i < o.brokerRestarts; i++) faults.push({ at: at(), kind: 'broker-restart', downForMs: rnd.int(200, 2000) });
  for (let i = 0; i < o.pauses; i++) {
    const when = at();
    const target = rnd.pick(TARGETS.filter((t) => t !== 'api'));
    faults.push({ at: when, kind: 'pause', target, instance: instanceOf(target), forMs: o.pauseMs });
  }
  return faults.sort((a, b) => a.at - b.at);
}
