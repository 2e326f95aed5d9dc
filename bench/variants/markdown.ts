// Markdown tables of a run-all summary, printed at the end of `npm run bench` for pasting into BENCHMARKS.md.
import type { Summary } from '../chart.ts';

type Dist = { p50Ms?: number; p99Ms?: number; maxMs?: number; p50AtMostMs?: number; p99AtMostMs?: number; maxAtMostMs?: number; samples?: number };
type Rec = Record<string, any>; // results are plain JSON of several shapes

const row = (cells: unknown[]) => `| ${cells.map((c) => (c === undefined || (typeof c === 'number' && Number.isNaN(c)) ? '–' : String(c))).join(' | ')} |`;
const ms = (d: Dist | undefined, le = false) =>
  d
    ? `${le ? '≤ ' : ''}${d[le ? 'p50AtMostMs' : 'p50Ms']} / ${le ? '≤ ' : ''}${d[le ? 'p99AtMostMs' : 'p99Ms']} / ${le ? '≤ ' : ''}${d[le ? 'maxAtMostMs' : 'maxMs']}`
    : '–';

/** The tables of BENCHMARKS.md for `summary`. */
export function renderMarkdown(summary: Summary): string {
  const r = summary.results as Record<string, Rec | undefined>;
  const out: string[] = [];
  const m = (summary.machine ?? {}) as Rec;
  out.push(
    `Run ${summary.startedAt ?? ''}${summary.quick ? ' — SHORT VALIDATION RUN (`--quick`, busy machine)' : ''}: ${m.cpus} × ${m.cpuModel}, Node ${m.node}, Bun ${m.bun}, ${m.deno}, ${m.natsServer}, @libsql/client ${m.libsqlClient} (SQLite ${m.sqlite}).`,
    '',
  );
  const cmd = r.commands;
  if (cmd?.runtimes) {
    out.push(
      `**bench:commands** — POST /orders, ${cmd.connections} connections, ${cmd.seconds} s after ${cmd.warmupSeconds} s warm-up, ${cmd.client ?? 'autocannon'}; req/s (p50 / p99 ms)`,
      '',
    );
    out.push(row(['runtime', ...cmd.variants.map((v: Rec) => `(${v.key}) ${v.label}`), 'c/b', 'c/d', 'c/a']));
    out.push(row(Array(cmd.variants.length + 4).fill('---')));
    for (const [runtime, x] of Object.entries(cmd.runtimes as Rec)) {
      const cells = cmd.variants.map((v: Rec) => {
        const y = x.variants[v.id];
        const failed = (y?.non2xx ?? 0) + (y?.errors ?? 0) + (y?.timeouts ?? 0);
        return y?.reqPerSec !== undefined ? `${y.reqPerSec} (${y.p50Ms} / ${y.p99Ms})${failed ? ` **${failed} failed**` : ''}` : `error`;
      });
      out.push(row([runtime, ...cells, x.ratios.cOverB, x.ratios.cOverD, x.ratios.cOverA]));
    }
    out.push('');
  }
  const lag = r.lag;
  if (lag?.commitToApplied) {
    out.push(
      `**bench:lag** — ${lag.rate} commands/s for ${lag.seconds} s (sent ${lag.sentRate}/s), ${lag.runtime}, ${lag.topology}, subscriber: ${lag.subscriber}`,
      '',
    );
    out.push(row(['measure', 'p50 / p99 / max (ms)', 'events']), row(['---', '---', '---']));
    out.push(row(['POST /orders (from due time)', ms(lag.http), lag.http?.requests]));
    out.push(row(['commit → PubAck (outbox_publish_lag_seconds buckets)', ms(lag.commitToPubAck, true), lag.commitToPubAck?.samples]));
    if (lag.commitToStream) out.push(row(['commit → stored in the stream (Occurred-At → stream time)', ms(lag.commitToStream), lag.commitToStream.samples]));
    out.push(row(['commit → marked sent (outbox.sent_at)', ms(lag.commitToSentAt), lag.commitToSentAt?.samples]));
    out.push(row(['commit → applied (inbox.received_at)', ms(lag.commitToApplied), lag.commitToApplied?.samples]));
    out.push('');
  }
  const c = r.cleanup;
  if (c?.compaction) {
    out.push(
      `**bench:cleanup** — ${c.rate} POST/s (${c.runtime}, ROLES=api,relay) while compactOutbox deletes ${c.compaction.deleted} sent rows in ${c.compaction.batches} batches of ${c.batchSize}: ${c.compaction.totalMs} ms (${c.compaction.rowsPerSec} rows/s, batches ${c.compaction.batchMs.join(', ')} ms)`,
      '',
    );
    out.push(row(['POST /orders', 'p50 / p99 / max (ms)', 'requests', 'failed']), row(['---', '---', '---', '---']));
    out.push(row(['idle (before)', ms(c.idle), c.idle.requests, c.idle.failed]));
    out.push(row(['during compaction', ms(c.duringCompaction), c.duringCompaction.requests, c.duringCompaction.failed]));
    out.push(row(['p99 during / idle', c.p99Ratio, '', '']));
    out.push('');
  }
  const relay = r.relay;
  if (relay?.sizes) {
    out.push(
      '**bench:relay** — one relay process (`src/entry/relay.ts`) draining a backlog vs raw pipelined publishing of the same messages (256 in flight), same run',
      '',
    );
    out.push(
      row(['payload', 'rows', 'raw msg/s', 'relay ev/s', '× raw', 'CPU µs/event relay + nats-server', 'spawn → 1st publish ms', 'backlog → 1st publish ms']),
      row(Array(8).fill('---')),
    );
    for (const x of relay.sizes as Rec[])
      out.push(
        row([
          `${x.avgPayloadBytes} B`,
          x.rows,
          x.rawPublishPerSec,
          x.relayPerSec,
          x.ratioToRaw,
          `${x.relayCpuUsPerEvent} + ${x.natsCpuUsPerEvent}`,
          x.spawnToFirstPublishMs,
          x.insertToFirstPublishMs,
        ]),
      );
    out.push('');
  } else if (relay?.rawPublishPerSec) {
    out.push(
      `**bench:relay** — ${relay.messages} events of ~${relay.avgPayloadBytes} B: raw pipelined publish ${relay.rawPublishPerSec} msg/s, relay ${relay.relayDrainPerSec} ev/s (ratio ${relay.ratioRelayToRaw}); in-process commit → PubAck at ${relay.lag?.rate}/s: p50 ${relay.lag?.p50Ms} ms, p99 ${relay.lag?.p99Ms} ms, max ${relay.lag?.maxMs} ms`,
      '',
    );
  }
  for (const [name, x] of Object.entries(r)) {
    if (['commands', 'lag', 'cleanup', 'relay'].includes(name) || !x) continue;
    const flat = Object.entries(x)
      .filter(([, v]) => typeof v !== 'object')
      .map(([k, v]) => `${k} ${v}`);
    out.push(`**bench:${name}** — ${flat.join(', ')}`, '');
  }
  return out.join('\n');
}
