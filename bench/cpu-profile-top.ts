// node --import tsx bench/cpu-profile-top.ts <file.cpuprofile> [--top 25]
// The top frames of a V8 CPU profile (`node --cpu-prof`): by self time, and by total (inclusive) time, with the
// share of the sampled time each takes; frames are grouped by function, file and line. Idle and GC are listed as such.
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { ROOT } from '../test/support/process.ts';
import { numberArg } from './support.ts';

type Node = { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[]; hitCount?: number };
type Profile = { nodes: Node[]; samples: number[]; timeDeltas: number[]; startTime: number; endTime: number };

const file = process.argv[2];
if (!file) throw new Error('usage: node --import tsx bench/cpu-profile-top.ts <file.cpuprofile> [--top 25]');
const TOP = numberArg('top', 25);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
// time per sample: the delta to the next sample
const selfUs = new Map<number, number>();
for (let i = 0; i < profile.samples.length; i++) {
  const dt = profile.timeDeltas[i + 1] ?? 0;
  selfUs.set(profile.samples[i]!, (selfUs.get(profile.samples[i]!) ?? 0) + dt);
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
