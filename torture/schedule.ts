import { createRandom } from '../test/support/random.ts';

/** The fixture service's processes: its API, its relay and its two subscribers. */
export type ProcessName = 'api' | 'relay' | 'balances' | 'audit';
export type Fault =
  | { at: number; kind: 'kill'; target: ProcessName; restartAfterMs: number }
  | { at: number; kind: 'pause'; target: ProcessName; forMs: number }
  | { at: number; kind: 'broker-restart'; downForMs: number };

export type ScheduleOptions = { seed: number; commands: number; kills: number; brokerRestarts: number; pauses: number; pauseMs: number };

const TARGETS: readonly ProcessName[] = ['api', 'relay', 'balances', 'audit'];

/**
 * The fault schedule of a run, as positions in the command stream (fault i happens once `at` commands were
 * sent). Derived from the seed alone: the same options give the same schedule. Kills cycle through every
 * process kind first, so a small run still hits each of them.
 */
export function buildSchedule(o: ScheduleOptions): Fault[] {
  const rnd = createRandom(o.seed);
  const faults: Fault[] = [];
  const at = () => rnd.int(Math.floor(o.commands * 0.05), Math.floor(o.commands * 0.9));
  for (let i = 0; i < o.kills; i++) {
    const target = i < TARGETS.length ? TARGETS[(i + o.seed) % TARGETS.length]! : rnd.pick(TARGETS);
    faults.push({ at: at(), kind: 'kill', target, restartAfterMs: rnd.int(50, 1500) });
  }
  for (let i = 0; i < o.brokerRestarts; i++) faults.push({ at: at(), kind: 'broker-restart', downForMs: rnd.int(200, 2000) });
  for (let i = 0; i < o.pauses; i++) faults.push({ at: at(), kind: 'pause', target: rnd.pick(TARGETS.filter((t) => t !== 'api')), forMs: o.pauseMs });
  return faults.sort((a, b) => a.at - b.at);
}
