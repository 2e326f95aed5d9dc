// node --import tsx bench/chart.ts [summary.json] [out.svg]
// Draws bench/benchmarks.svg from bench/latest.json (written by `npm run bench`), by hand, no dependencies:
//   (i)  the end-to-end lag distribution of bench:lag as CDFs on a log time axis;
//   (ii) POST /orders throughput of bench:commands, one group of bars per runtime, with the reference ceiling.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

type Cdf = Array<[number, number]>;
type LagResult = {
  rate: number;
  seconds: number;
  runtime: string;
  topology: string;
  commitToPubAck?: { cdf: Cdf; p50AtMostMs: number; p99AtMostMs: number; samples: number };
  commitToStream?: { cdf: Cdf; p50Ms: number; p99Ms: number; samples: number };
  commitToSentAt?: { cdf: Cdf; p50Ms: number; p99Ms: number; samples: number };
  commitToApplied?: { cdf: Cdf; p50Ms: number; p99Ms: number; samples: number };
};
type CommandsResult = {
  /** The load generator: wrk, or autocannon in the benchmark's process (results from before `client` was recorded say none). */
  client?: string;
  connections: number;
  seconds: number;
  variants: Array<{ key: string; id: string; label: string }>;
  runtimes: Record<
    string,
    { variants: Record<string, { reqPerSec?: number; p99Ms?: number; error?: string }>; ratios?: { cOverB: number; cOverD: number; cOverA: number } }
  >;
};
export type Summary = { startedAt?: string; quick?: boolean; machine?: Record<string, unknown>; results: Record<string, unknown> };

/** Reference ceilings (docs/architecture.md, "Numbers that size things"): Hono trivial zod POST per runtime, what variant (a) is compared against. */
const CEILINGS: Record<string, number> = { node: 13_000, bun: 45_000, deno: 58_000 };
const W = 1040;
const MAX_NINES = 3.4;
const FONT = 'font-family="system-ui, -apple-system, Segoe UI, sans-serif"';
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const text = (x: number, y: number, s: string, extra = '') => `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" ${extra}>${esc(s)}</text>`;
const fmt = (n: number) => (n >= 10_000 ? `${Math.round(n / 1000)}k` : n >= 1000 ? `${(n / 1000).toFixed(1)}k` : String(Math.round(n)));

function lagPanel(lag: LagResult | undefined, top: number): string {
  const h = 330;
  const box = { x: 70, y: top + 50, w: W - 400, h: h - 100 };
  const out = [
    text(
      20,
      top + 24,
      lag ? `End-to-end lag at ${lag.rate} commands/s for ${lag.seconds} s (${lag.runtime}, ${lag.topology})` : 'End-to-end lag: no bench:lag result',
      `font-size="15" font-weight="600"`,
    ),
  ];
  if (!lag) return out.join('\n');
  /** A series of per-event measurements (linear CDF with its own p50 and p99). */
  const measured = (name: string, color: string, d: typeof lag.commitToStream) => ({ name, color, d, steps: false, p50: d?.p50Ms, p99: d?.p99Ms, le: false });
  const series = [
    {
      name: 'commit → PubAck (histogram buckets)',
      color: '#54a24b',
      d: lag.commitToPubAck,
      steps: true,
      p50: lag.commitToPubAck?.p50AtMostMs,
      p99: lag.commitToPubAck?.p99AtMostMs,
      le: true,
    },
    measured('commit → stored in the stream', '#b279a2', lag.commitToStream),
    measured('commit → marked sent (outbox.sent_at)', '#4c78a8', lag.commitToSentAt),
    measured('commit → applied (inbox.received_at)', '#f58518', lag.commitToApplied),
  ];
  const hist = lag.commitToPubAck?.cdf ?? [];
  const histMax = hist.find(([, pct]) => pct >= 100)?.[0] ?? hist.at(-1)?.[0] ?? 0;
  const lineMax = series.filter((s) => !s.steps).flatMap((s) => (s.d?.cdf ?? []).map(([, ms]) => ms));
  const maxMs = Math.max(10, histMax, ...lineMax);
  const hi = 10 ** Math.ceil(Math.log10(maxMs));
  const lo = 1;
  const x = (ms: number) => box.x + (Math.log10(Math.min(hi, Math.max(lo, ms))) / Math.log10(hi / lo)) * box.w;
  // y in "nines" so the tail is visible: 0 → 0 %, 1 → 90 %, 2 → 99 %, 3 → 99.9 %; 100 % (the max) sits above
  const nines = (pct: number) => (pct >= 100 ? MAX_NINES : Math.min(3, -Math.log10(1 - pct / 100)));
  const y = (pct: number) => box.y + box.h - (nines(pct) / MAX_NINES) * box.h;
  out.push(`<rect x="${box.x}" y="${box.y}" width="${box.w}" height="${box.h}" fill="none" stroke="#ccc"/>`);
  for (let v = lo; v <= hi; v *= 10) {
    out.push(
      `<line x1="${x(v)}" y1="${box.y}" x2="${x(v)}" y2="${box.y + box.h}" stroke="#eee"/>`,
      text(x(v), box.y + box.h + 16, v >= 1000 ? `${v / 1000} s` : `${v} ms`, 'font-size="11" text-anchor="middle" fill="#555"'),
    );
  }
  for (const pct of [0, 50, 90, 99, 99.9, 100]) {
    out.push(
      `<line x1="${box.x}" y1="${y(pct)}" x2="${box.x + box.w}" y2="${y(pct)}" stroke="#eee"/>`,
      text(box.x - 6, y(pct) + 4, pct === 100 ? 'max' : `${pct}%`, 'font-size="11" text-anchor="end" fill="#555"'),
    );
  }
  out.push(
    text(box.x + box.w / 2, box.y + box.h + 34, 'latency (log scale; values below 1 ms drawn at 1 ms)', 'font-size="11" text-anchor="middle" fill="#555"'),
  );
  out.push(
    text(
      16,
      box.y + box.h / 2,
      'share of events at or below',
      `font-size="11" fill="#555" transform="rotate(-90 16 ${box.y + box.h / 2})" text-anchor="middle"`,
    ),
  );
  series.forEach((s, i) => {
    const ly = box.y + 10 + i * 46;
    const lx = box.x + box.w + 20;
    out.push(`<rect x="${lx}" y="${ly - 9}" width="14" height="4" fill="${s.color}"/>`, text(lx + 20, ly - 3, s.name, 'font-size="11"'));
    out.push(
      text(
        lx + 20,
        ly + 12,
        s.d ? `p50 ${s.le ? '≤ ' : ''}${s.p50} ms · p99 ${s.le ? '≤ ' : ''}${s.p99} ms · n=${s.d.samples}` : 'no data',
        'font-size="11" fill="#555"',
      ),
    );
    if (!s.d || s.d.cdf.length === 0) return;
    if (s.steps) {
      // histogram: the share of events at or below each bucket bound (points joined as steps)
      let prev = 0;
      const pts: string[] = [`${x(lo)},${y(0)}`];
      for (const [le, pct] of s.d.cdf) {
        pts.push(`${x(le)},${y(prev)}`, `${x(le)},${y(pct)}`);
        prev = pct;
      }
      out.push(`<polyline points="${pts.join(' ')}" fill="none" stroke="${s.color}" stroke-width="2" stroke-dasharray="5 3"/>`);
      for (const [le, pct] of s.d.cdf) out.push(`<circle cx="${x(le)}" cy="${y(pct)}" r="2.5" fill="${s.color}"/>`);
    } else {
      const pts = s.d.cdf.map(([pct, ms]) => `${x(ms).toFixed(1)},${y(pct).toFixed(1)}`);
      out.push(`<polyline points="${pts.join(' ')}" fill="none" stroke="${s.color}" stroke-width="2"/>`);
    }
  });
  return out.join('\n');
}

function throughputPanel(cmd: CommandsResult | undefined, top: number): string {
  const h = 360;
  const box = { x: 70, y: top + 60, w: W - 400, h: h - 120 };
  const out = [
    text(
      20,
      top + 24,
      cmd
        ? `POST /orders throughput by variant (${cmd.connections} connections, ${cmd.seconds} s each, ${cmd.client ?? 'autocannon'})`
        : 'Throughput: no bench:commands result',
      `font-size="15" font-weight="600"`,
    ),
  ];
  if (!cmd) return out.join('\n');
  const colors = ['#9aa5b1', '#4c78a8', '#f58518', '#e45756'];
  const runtimes = Object.keys(cmd.runtimes);
  const values = runtimes.flatMap((r) => cmd.variants.map((v) => cmd.runtimes[r]!.variants[v.id]?.reqPerSec ?? 0));
  const ceilingsShown = runtimes.map((r) => CEILINGS[r] ?? 0);
  const maxV = Math.max(1, ...values, ...ceilingsShown);
  const step = 10 ** Math.floor(Math.log10(maxV));
  const top_ = Math.ceil(maxV / step) * step;
  const y = (v: number) => box.y + box.h - (v / top_) * box.h;
  for (let v = 0; v <= top_; v += top_ / 5) {
    out.push(
      `<line x1="${box.x}" y1="${y(v)}" x2="${box.x + box.w}" y2="${y(v)}" stroke="#eee"/>`,
      text(box.x - 6, y(v) + 4, fmt(v), 'font-size="11" text-anchor="end" fill="#555"'),
    );
  }
  out.push(text(16, box.y + box.h / 2, 'requests/s (2xx)', `font-size="11" fill="#555" transform="rotate(-90 16 ${box.y + box.h / 2})" text-anchor="middle"`));
  const groupW = box.w / Math.max(1, runtimes.length);
  const barW = Math.min(40, (groupW - 30) / cmd.variants.length);
  runtimes.forEach((r, gi) => {
    const gx = box.x + gi * groupW + (groupW - barW * cmd.variants.length) / 2;
    cmd.variants.forEach((v, vi) => {
      const res = cmd.runtimes[r]!.variants[v.id];
      const bx = gx + vi * barW;
      if (!res || res.reqPerSec === undefined) {
        out.push(text(bx + barW / 2, box.y + box.h - 4, 'err', 'font-size="10" text-anchor="middle" fill="#c00"'));
        return;
      }
      out.push(
        `<rect x="${bx + 2}" y="${y(res.reqPerSec)}" width="${barW - 4}" height="${box.y + box.h - y(res.reqPerSec)}" fill="${colors[vi % colors.length]}"><title>${esc(`${r} (${v.key}) ${v.label}: ${res.reqPerSec} req/s, p99 ${res.p99Ms} ms`)}</title></rect>`,
      );
      out.push(text(bx + barW / 2, y(res.reqPerSec) - 4, fmt(res.reqPerSec), 'font-size="10" text-anchor="middle"'));
    });
    const ceiling = CEILINGS[r];
    if (ceiling) {
      const x1 = gx - 6;
      const x2 = gx + barW * cmd.variants.length + 6;
      out.push(
        `<line x1="${x1}" y1="${y(ceiling)}" x2="${x2}" y2="${y(ceiling)}" stroke="#333" stroke-dasharray="4 3"/>`,
        text(x2, y(ceiling) - 4, `reference ${fmt(ceiling)}`, 'font-size="10" text-anchor="end" fill="#333"'),
      );
    }
    out.push(text(box.x + gi * groupW + groupW / 2, box.y + box.h + 18, r, 'font-size="13" text-anchor="middle" font-weight="600"'));
    const q = cmd.runtimes[r]!.ratios;
    if (q)
      out.push(
        text(
          box.x + gi * groupW + groupW / 2,
          box.y + box.h + 34,
          `c/b ${q.cOverB} · c/d ${q.cOverD} · c/a ${q.cOverA}`,
          'font-size="11" text-anchor="middle" fill="#555"',
        ),
      );
  });
  cmd.variants.forEach((v, vi) => {
    const ly = box.y + 10 + vi * 26;
    const lx = box.x + box.w + 20;
    out.push(
      `<rect x="${lx}" y="${ly - 10}" width="12" height="12" fill="${colors[vi % colors.length]}"/>`,
      text(lx + 18, ly, `(${v.key}) ${v.label}`, 'font-size="11"'),
    );
  });
  out.push(text(box.x + box.w + 20, box.y + 10 + cmd.variants.length * 26 + 8, '- - - reference ceiling (trivial zod POST)', 'font-size="11" fill="#333"'));
  return out.join('\n');
}

/** The SVG document for a summary written by run-all. */
export function renderChart(summary: Summary): string {
  const lag = summary.results.lag as LagResult | undefined;
  const cmd = summary.results.commands as CommandsResult | undefined;
  const m = summary.machine ?? {};
  const footer1 = `${summary.quick ? 'SHORT VALIDATION RUN on a busy machine: not the reference figures. ' : ''}${summary.startedAt ?? ''}`;
  const footer2 = `${m.cpus ?? '?'} cores ${m.cpuModel ?? ''} · Node ${m.node ?? '?'} · Bun ${m.bun ?? '?'} · ${m.deno ?? ''} · ${m.natsServer ?? ''} · @libsql/client ${m.libsqlClient ?? '?'} (SQLite ${m.sqlite ?? '?'})`;
  const height = 760;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${height}" viewBox="0 0 ${W} ${height}" ${FONT}>`,
    `<rect width="${W}" height="${height}" fill="#fff"/>`,
    lagPanel(lag, 0),
    throughputPanel(cmd, 340),
    text(20, height - 26, footer1, `font-size="11" fill="${summary.quick ? '#c00' : '#777'}"`),
    text(20, height - 10, footer2, 'font-size="10" fill="#777"'),
    '</svg>',
    '',
  ].join('\n');
}

/** Writes the chart of `summaryFile` to `outFile`. */
export function writeChart(summaryFile = join(import.meta.dirname, 'latest.json'), outFile = join(import.meta.dirname, 'benchmarks.svg')): string {
  const summary = JSON.parse(readFileSync(summaryFile, 'utf8')) as Summary;
  writeFileSync(outFile, renderChart(summary));
  return outFile;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(`chart: ${writeChart(process.argv[2], process.argv[3])}`);
}
