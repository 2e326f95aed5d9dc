// A minimal Prometheus text-format registry: counters and histograms kept in memory, gauges set by their owners or
// read at scrape time. Every kind takes labels; keep their values bounded (routes, consumers, reasons, never ids).

export type Labels = Record<string, string>;

export type Counter = {
  inc(labels?: Labels, by?: number): void;
  get(labels?: Labels): number;
  /** The series of `labels`, its key worked out once: for a caller that counts the same labels on a hot path. */
  series(labels?: Labels): { inc(by?: number): void };
};
/** A histogram's state: cumulative count per upper bound `le` (ascending; +Inf is `count`), total count and sum. */
export type HistogramSnapshot = { buckets: Array<{ le: number; count: number }>; count: number; sum: number };
export type Histogram = {
  observe(value: number, labels?: Labels): void;
  count(labels?: Labels): number;
  snapshot(labels?: Labels): HistogramSnapshot;
  /** The series of `labels`, created now (it shows from the next scrape on), its key worked out once: for a hot path. */
  series(labels?: Labels): { observe(value: number): void };
};
export type Gauge = { set(value: number, labels?: Labels): void; get(labels?: Labels): number | undefined; delete(labels?: Labels): void };

export type Metrics = {
  /** A counter named `name` (registered once; later calls return the same one). */
  counter(name: string, help: string): Counter;
  /**
   * A histogram named `name` with upper bounds `buckets` (registered once; later calls return the same one). One
   * without `labelled` shows an empty series before its first observation; a labelled one shows none until then.
   */
  histogram(name: string, help: string, buckets: number[], options?: { labelled?: boolean }): Histogram;
  /** A gauge named `name` (registered once; later calls return the same one). */
  gauge(name: string, help: string): Gauge;
  /** Registers work run before each render, e.g. reading gauges from the database once per scrape. */
  beforeRender(collect: () => Promise<void>): void;
  /** Renders every metric in the Prometheus text exposition format. */
  render(): Promise<string>;
};

const escapeValue = (v: string) => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');

const labelKey = (labels: Labels = {}) =>
  Object.keys(labels)
    .sort()
    .map((k) => `${k}="${escapeValue(labels[k]!)}"`)
    .join(',');

const series = (name: string, key: string, extra?: string) => {
  const all = [key, extra].filter(Boolean).join(',');
  return all ? `${name}{${all}}` : name;
};

const formatNumber = (n: number) => (Number.isNaN(n) ? 'NaN' : n === Infinity ? '+Inf' : n === -Infinity ? '-Inf' : String(n));

type HistogramSeries = { counts: number[]; sum: number; total: number };

/** Creates an empty registry; one per process, passed to whoever counts. */
export function createMetrics(): Metrics {
  const renderers: Array<() => string> = [];
  const collectors: Array<() => Promise<void>> = [];
  const registered = new Map<string, { kind: string; metric: unknown }>();
  const once = <T>(name: string, kind: string, make: () => T): T => {
    const existing = registered.get(name);
    if (existing) {
      if (existing.kind !== kind) throw new Error(`metric ${name} is already registered as a ${existing.kind}`);
      return existing.metric as T;
    }
    const metric = make();
    registered.set(name, { kind, metric });
    return metric;
  };
  const header = (name: string, help: string, type: string) => [
    `# HELP ${name} ${help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}`,
    `# TYPE ${name} ${type}`,
  ];

  return {
    counter: (name, help) =>
      once(name, 'counter', () => {
        const values = new Map<string, number>();
        renderers.push(() => {
          const lines = header(name, help, 'counter');
          if (values.size === 0) lines.push(`${name} 0`);
          for (const [k, v] of values) lines.push(`${series(name, k)} ${formatNumber(v)}`);
          return lines.join('\n');
        });
        const add = (k: string, by: number) => void values.set(k, (values.get(k) ?? 0) + by);
        return {
          inc: (labels, by = 1) => add(labelKey(labels), by),
          get: (labels) => values.get(labelKey(labels)) ?? 0,
          series(labels) {
            const k = labelKey(labels);
            return { inc: (by = 1) => add(k, by) };
          },
        } satisfies Counter;
      }),
    histogram: (name, help, buckets, options) =>
      once(name, 'histogram', () => {
        const sorted = [...buckets].sort((a, b) => a - b);
        const all = new Map<string, HistogramSeries>();
        const seriesOf = (labels?: Labels) => {
          const k = labelKey(labels);
          let s = all.get(k);
          if (!s) all.set(k, (s = { counts: new Array<number>(sorted.length).fill(0), sum: 0, total: 0 }));
          return s;
        };
        renderers.push(() => {
          const lines = header(name, help, 'histogram');
          if (all.size === 0 && !options?.labelled) seriesOf();
          for (const [k, s] of all) {
            sorted.forEach((b, i) => lines.push(`${series(`${name}_bucket`, k, `le="${b}"`)} ${s.counts[i]}`));
            lines.push(
              `${series(`${name}_bucket`, k, 'le="+Inf"')} ${s.total}`,
              `${series(`${name}_sum`, k)} ${s.sum}`,
              `${series(`${name}_count`, k)} ${s.total}`,
            );
          }
          return lines.join('\n');
        });
        const record = (s: HistogramSeries, value: number) => {
          s.total++;
          s.sum += value;
          for (let i = 0; i < sorted.length; i++) if (value <= sorted[i]!) s.counts[i]!++;
        };
        return {
          observe: (value, labels) => record(seriesOf(labels), value),
          series(labels) {
            const s = seriesOf(labels);
            return { observe: (value) => record(s, value) };
          },
          count: (labels) => all.get(labelKey(labels))?.total ?? 0,
          snapshot(labels) {
            const s = all.get(labelKey(labels));
            return { buckets: sorted.map((le, i) => ({ le, count: s?.counts[i] ?? 0 })), count: s?.total ?? 0, sum: s?.sum ?? 0 };
          },
        } satisfies Histogram;
      }),
    gauge: (name, help) =>
      once(name, 'gauge', () => {
        const values = new Map<string, number>();
        renderers.push(() => {
          const lines = header(name, help, 'gauge');
          for (const [k, v] of values) lines.push(`${series(name, k)} ${formatNumber(v)}`);
          return lines.join('\n');
        });
        return {
          set: (value, labels) => void values.set(labelKey(labels), value),
          get: (labels) => values.get(labelKey(labels)),
          delete: (labels) => void values.delete(labelKey(labels)),
        } satisfies Gauge;
      }),
    beforeRender(collect) {
      collectors.push(collect);
    },
    async render() {
      await Promise.all(collectors.map((c) => c()));
      return `${renderers.map((r) => r()).join('\n')}\n`;
    },
  };
}
