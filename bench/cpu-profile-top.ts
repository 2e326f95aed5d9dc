// node --import tsx bench/cpu-profile-top.ts <file.cpuprofile> [--top 25] [--busiest 2]
// The top frames of a V8 CPU profile (`node --cpu-prof`): by self time, and by total (inclusive) time, with the
// share of the sampled time each takes; frames are grouped by function, file and line. Idle and GC are listed as such.
// --busiest S keeps only the S seconds with the least idle time (a drain, leaving out start-up and waiting).
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { ROOT } from '../test/support/process.ts';
import { numberArg } from './support.ts';

type Node = { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[]; hitCount?: number };
type Profile = { nodes: Node[]; samples: number[]; timeDeltas: number[]; startTime: number; endTime: number };

const file = process.argv[2];
if (!file) throw new Error('usage: node --import tsx bench/cpu-profile-top.ts <file.cpuprofile> [--top 25]');
const TOP = numberArg('top', 25);
const BUSIEST_MS = numberArg('busiest', 0) * 1000;
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
// time per sample: the delta to the next sample
const idle = new Set(profile.nodes.filter((n) => n.callFrame.functionName === '(idle)').map((n) => n.id));
const [from, to] = BUSIEST_MS > 0 ? busiestWindow(BUSIEST_MS * 1000) : [0, profile.samples.length];
const selfUs = new Map<number, number>();
for (let i = from; i < to; i++) {
  const dt = profile.timeDeltas[i + 1] ?? 0;
  selfUs.set(profile.samples[i]!, (selfUs.get(profile.samples[i]!) ?? 0) + dt);
}
/** The sample range [from, to) spanning `us` microseconds with the least idle time in it. */
function busiestWindow(us: number): [number, number] {
  let best: [number, number] = [0, profile.samples.length];
  let bestBusy = -1;
  let busy = 0;
  let span = 0;
  for (let from = 0, to = 0; to < profile.samples.length; to++) {
    const dt = profile.timeDeltas[to + 1] ?? 0;
    span += dt;
    if (!idle.has(profile.samples[to]!)) busy += dt;
    while (span > us && from < to) {
      const d = profile.timeDeltas[from + 1] ?? 0;
      span -= d;
      if (!idle.has(profile.samples[from]!)) busy -= d;
      from++;
    }
    if (busy > bestBusy) {
      bestBusy = busy;
      best = [from, to + 1];
    }
  }
  return best;
}
const label = (n: Node) => {
  const f = n.callFrame;
  const where = f.url ? `${relative(ROOT, f.url.replace(/^file:\/\//, ''))}:${f.lineNumber + 1}` : '';
  return `${f.functionName || '(anonymous)'} ${where}`.trim();
};
const self = new Map<string, number>();
const total = new Map<string, number>();
let all = 0;
for (const [id, us] of selfUs) {
  all += us;
  const n = byId.get(id)!;
  self.set(label(n), (self.get(label(n)) ?? 0) + us);
  // inclusive: every distinct frame on the stack, once
  const seen = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const l = label(byId.get(cur)!);
    if (seen.has(l)) continue;
    seen.add(l);
    total.set(l, (total.get(l) ?? 0) + us);
  }
}
const print = (title: string, m: Map<string, number>) => {
  console.log(`\n${title} (of ${(all / 1000).toFixed(0)} ms sampled)`);
  for (const [l, us] of [...m].sort((a, b) => b[1] - a[1]).slice(0, TOP))
    console.log(`${((100 * us) / all).toFixed(1).padStart(5)} %  ${(us / 1000).toFixed(0).padStart(6)} ms  ${l}`);
};
print('self time', self);
print('total time', total);
