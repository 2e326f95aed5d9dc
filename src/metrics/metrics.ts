// A minimal Prometheus text-format registry: counters and histograms kept in memory, gauges read at scrape time.

type Labels = Record<string, string>;

export type Counter = { inc(labels?: Labels, by?: number): void; get(labels?: Labels): number };
/** A histogram's state: cumulative count per upper bound `le` (ascending; +Inf is `count`), total count and sum. */
export type HistogramSnapshot = { buckets: Array<{ le: number; count: number }>; count: number; sum: number };
export type Histogram = { observe(value: number): void; count(): number; snapshot(): HistogramSnapshot };
export type Gauge = { set(value: number, labels?: Labels): void };

export type Metrics = {
  counter(name: string, help: string): Counter;
  histogram(name: string, help: string, buckets: number[]): Histogram;
  gauge(name: string, help: string): Gauge;
  /** Registers work run before each render, e.g. reading gauges from the database once per scrape. */
  beforeRender(collect: () => Promise<void>): void;
  /** Renders every metric in the Prometheus text exposition format. */
  render(): Promise<string>;
};

const labelKey = (labels: Labels = {}) =>
  Object.keys(labels)
    .sort()
    .map((k) => `${k}="${labels[k]!.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`)
    .join(',');

/** Creates an empty registry; one per process, passed to whoever counts. */
export function createMetrics(): Metrics {
  const renderers: Array<() => Promise<string>> = [];
  const collectors: Array<() => Promise<void>> = [];
  const counters = new Map<string, Counter>();
  return {
    counter(name, help) {
      const existing = counters.get(name);
      if (existing) return existing;
      const values = new Map<string, number>();
      const counter: Counter = {
        inc: (labels, by = 1) => {
          const k = labelKey(labels);
          values.set(k, (values.get(k) ?? 0) + by);
        },
        get: (labels) => values.get(labelKey(labels)) ?? 0,
      };
      counters.set(name, counter);
      renderers.push(async () => {
        const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} counter`];
        if (values.size === 0) lines.push(`${name} 0`);
        for (const [k, v] of values) lines.push(k ? `${name}{${k}} ${v}` : `${name} ${v}`);
        return lines.join('\n');
      });
      return counter;
    },
    histogram(name, help, buckets) {
      const sorted = [...buckets].sort((a, b) => a - b);
      const counts = new Array<number>(sorted.length).fill(0);
      let sum = 0;
      let total = 0;
      renderers.push(async () => {
        const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} histogram`];
        sorted.forEach((b, i) => lines.push(`${name}_bucket{le="${b}"} ${counts[i]}`));
        lines.push(`${name}_bucket{le="+Inf"} ${total}`, `${name}_sum ${sum}`, `${name}_count ${total}`);
        return lines.join('\n');
      });
      return {
        observe(value) {
          total++;
          sum += value;
          for (let i = 0; i < sorted.length; i++) if (value <= sorted[i]!) counts[i]!++;
        },
        count: () => total,
        snapshot: () => ({ buckets: sorted.map((le, i) => ({ le, count: counts[i]! })), count: total, sum }),
      };
    },
    gauge(name, help) {
      const values = new Map<string, number>();
      renderers.push(async () => {
        const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} gauge`];
        for (const [k, v] of values) lines.push(k ? `${name}{${k}} ${v}` : `${name} ${v}`);
        return lines.join('\n');
      });
      return { set: (value, labels) => void values.set(labelKey(labels), value) };
    },
    beforeRender(collect) {
      collectors.push(collect);
    },
    async render() {
      await Promise.all(collectors.map((c) => c()));
      return (await Promise.all(renderers.map((r) => r()))).join('\n') + '\n';
    },
  };
}
