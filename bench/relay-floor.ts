// `npm run bench:relay -- --floor`: how close a relay can come to raw publishing on this machine whatever its marks
// cost. In this one process, on one private nats-server, alternating in each round, the same backlog of --rows rows:
//   (a) raw pipelined `js.publish` (256 in flight) of the backlog's messages, built beforehand (the goal's baseline);
//   (b) the relay's publisher (src/nats/ack-publisher.ts) sending the same pre-built messages, 256 in flight;
//   (c) relay passes (src/outbox/relay-pass.ts: the fetch, the row check, headers, spans, per-aggregate order, publish)
//       over the backlog, with the mark-sent writes left out (a writer that writes nothing);
//   (d) the same passes marking their rows sent, as the relay does.
// b/a is what the relay's publishing costs against js.publish; c/a bounds every design of the marks (marks that cost
// nothing); d/a is the in-process relay. Each with the process's CPU per message. Medians over --rounds.
// --profile writes a CPU profile of the counted (c) and (d) runs only (node:inspector), and prints its path.
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Writer } from '../src/db/writer.ts';
import { createAckPublisher } from '../src/nats/ack-publisher.ts';
import { ensureStream } from '../src/nats/ensure-stream.ts';
import { eventSubject } from '../src/nats/stream-settings.ts';
import { eventHeaders } from '../src/outbox/event-headers.ts';
import { createInFlight } from '../src/outbox/in-flight.ts';
import { relayPass } from '../src/outbox/relay-pass.ts';
import { createRelay } from '../src/outbox/relay.ts';
import type { StreamSettings } from '../src/nats/stream-settings.ts';
import type { Floor } from '../src/outbox/relay-store.ts';
import type { IntegrationEvent } from '../src/events/integration-event.ts';
import type { TestDb } from '../test/support/db.ts';
import { relayDeps } from '../test/support/relay.ts';
import { TEST_STREAM } from '../test/support/stream.ts';
import { createServiceDb, round, saveResult, startNats } from './support.ts';

const IN_FLIGHT = 256;
/** As the relay: batches a pass may fetch after its first while draining a backlog. */
const CONTINUATIONS = 3;

type Message = { id: string; data: Uint8Array; subject: string; headers: ReturnType<typeof eventHeaders> };
type Run = { perSec: number; cpuUsPerMsg: number };

/** A writer that writes nothing: every mark-sent write of a pass resolves at once with nothing parked or fenced. */
const NO_MARKS: Writer = {
  write: <T>() => Promise.resolve({ parked: [], fenced: 0 } as T),
  idle: () => Promise.resolve(),
};

async function freshStream(jsm: JetStreamManager, name: string) {
  const stream = { ...TEST_STREAM, name, prefix: name.toLowerCase(), maxBytes: 4 * 1024 ** 3 };
  await ensureStream(jsm, stream);
  return stream;
}

/** Times `work`, which sends `n` messages: messages per second and this process's CPU per message. */
async function timed(n: number, work: () => Promise<void>): Promise<Run> {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await work();
  const secs = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  return { perSec: Math.round(n / secs), cpuUsPerMsg: round((cpu.user + cpu.system) / n, 1) };
}

/** The backlog's messages as the relay publishes them: stored bytes, its headers with a traceparent, subject, id. */
async function messagesOf(t: TestDb, prefix: string): Promise<Message[]> {
  const rs = await t.client.execute('SELECT id, aggregate_type, aggregate_id, partition, payload FROM outbox ORDER BY seq');
  const enc = new TextEncoder();
  const traceparent = `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`;
  return rs.rows.map((r) => {
    const payload = String(r.payload);
    return {
      id: String(r.id),
      data: enc.encode(payload),
      subject: eventSubject(prefix, String(r.aggregate_type), String(r.aggregate_id), Number(r.partition)),
      headers: eventHeaders(JSON.parse(payload) as IntegrationEvent, { traceparent, msgId: String(r.id) }),
    };
  });
}

/** (a) js.publish, awaiting only when the window is full, as the relay and bench:relay's raw side do. */
async function raw(url: string, messages: Message[]): Promise<void> {
  const nc = await connect({ servers: [url], noAsyncTraces: true });
  const js = jetstream(nc);
  const inFlight = createInFlight(IN_FLIGHT);
  for (const m of messages) {
    if (inFlight.full()) await inFlight.slot();
    inFlight.track(js.publish(m.subject, m.data, { msgID: m.id, headers: m.headers }));
  }
  await inFlight.drained();
  await nc.close();
}

/** (b) the relay's publisher over the same messages. */
async function ackPublisher(url: string, messages: Message[]): Promise<void> {
  const nc = await connect({ servers: [url], noAsyncTraces: true });
  const publisher = createAckPublisher(nc, 30_000);
  let live = 0;
  let failed: unknown;
  let wake: (() => void) | undefined;
  const done = (error: unknown) => {
    failed ??= error;
    live--;
    wake?.();
  };
  for (const m of messages) {
    while (live >= IN_FLIGHT) await new Promise<void>((r) => (wake = r));
    live++;
    publisher.publish(m.subject, m.data, m.headers, done);
  }
  while (live > 0) await new Promise<void>((r) => (wake = r));
  publisher.close();
  await nc.close();
  if (failed !== undefined) throw failed;
}

/** (c) and (d): relay passes over the outbox, as the relay drives them on a backlog; false leaves the marks out. */
async function passes(t: TestDb, url: string, prefix: string, marks: boolean): Promise<number> {
  const deps = relayDeps(t, url, { settings: { prefix, maxInFlight: IN_FLIGHT }, ...(marks ? {} : { writer: NO_MARKS }) });
  const nc = await connect({ servers: [url], noAsyncTraces: true });
  const publisher = createAckPublisher(nc, 30_000);
  let floor: Floor | undefined;
  let marking: { done: Promise<void>; seqs: number[] } | undefined;
  let published = 0;
  try {
    for (;;) {
      const pass = await relayPass(deps, publisher, {
        ...(marking ? { exclude: marking.seqs } : {}),
        continuations: CONTINUATIONS,
        ...(floor ? { floor } : {}),
        deferMark: true,
      });
      await marking?.done;
      if (pass.brokerError !== undefined || pass.failed > 0) throw new Error(`a pass failed: ${String(pass.brokerError ?? pass.failed)}`);
      published += pass.published + pass.duplicates;
      floor = pass.scannedTo;
      marking = { done: pass.marked, seqs: pass.ackedSeqs };
      if (!pass.more) break;
    }
    await marking?.done;
  } finally {
    publisher.close();
    await nc.close();
  }
  return published;
}

/** (e) the relay as the service runs it (createRelay: its loop, partition leases and fenced marks), in this process. */
async function relayRun(t: TestDb, url: string, stream: StreamSettings): Promise<number> {
  const summary = await createRelay(relayDeps(t, url, { stream, settings: { maxInFlight: IN_FLIGHT } })).run({ untilIdle: true });
  return summary.published + summary.duplicates;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;

/** A CPU profiler (node:inspector) that samples only inside `during`; `save` writes the last profile of each label. */
async function startProfiler() {
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  const last = new Map<string, unknown>();
  return {
    async during<T>(label: string, work: () => Promise<T>): Promise<T> {
      await session.post('Profiler.start');
      try {
        return await work();
      } finally {
        last.set(label, (await session.post('Profiler.stop')).profile);
      }
    },
    save(): string[] {
      const dir = mkdtempSync(join(tmpdir(), 'relay-floor-prof-'));
      session.disconnect();
      return [...last].map(([label, profile]) => {
        const file = join(dir, `${label}.cpuprofile`);
        writeFileSync(file, JSON.stringify(profile));
        return file;
      });
    },
  };
}

/** Runs the four sides `rounds` times on backlogs of `rows` rows built by `fill`; prints and saves their ratios. */
export async function benchRelayFloor(o: { rows: number; rounds: number; fill: (t: TestDb, n: number) => Promise<void>; profile?: boolean }): Promise<void> {
  const nats = await startNats();
  const profiler = o.profile ? await startProfiler() : undefined;
  const profiled = <T>(label: string, counted: boolean, work: () => Promise<T>) => (profiler && counted ? profiler.during(label, work) : work());
  try {
    const nc = await connect({ servers: [nats.url] });
    const jsm = await jetstreamManager(nc);
    const sides: Record<'a' | 'b' | 'c' | 'd' | 'e', Run[]> = { a: [], b: [], c: [], d: [], e: [] };
    let avgBytes = 0;
    // round 0 warms every side up (the JIT, the driver's statement cache) and is not counted
    for (let r = 0; r <= o.rounds; r++) {
      const rows = r === 0 ? Math.min(o.rows, 3000) : o.rows;
      // a backlog for each relay side (the one without marks leaves its rows pending), the same messages for (a), (b)
      const [withoutMarks, withMarks, relayed] = [await createServiceDb(), await createServiceDb(), await createServiceDb()];
      try {
        await o.fill(withoutMarks, rows);
        await o.fill(withMarks, rows);
        await o.fill(relayed, rows);
        const sa = await freshStream(jsm, `FLOOR_A${r}`);
        const sb = await freshStream(jsm, `FLOOR_B${r}`);
        const messagesA = await messagesOf(withoutMarks, sa.prefix);
        const messagesB = messagesA.map((m) => ({ ...m, subject: m.subject.replace(sa.prefix, sb.prefix) }));
        avgBytes = Math.round(messagesA.reduce((s, m) => s + m.data.length, 0) / messagesA.length);
        const sc = await freshStream(jsm, `FLOOR_C${r}`);
        const sd = await freshStream(jsm, `FLOOR_D${r}`);
        const se = await freshStream(jsm, `FLOOR_E${r}`);
        const runs = { a: await timed(rows, () => raw(nats.url, messagesA)), b: await timed(rows, () => ackPublisher(nats.url, messagesB)) } as Record<
          keyof typeof sides,
          Run
        >;
        let c = 0;
        runs.c = await timed(rows, () =>
          profiled('passes-without-marks', r > 0, async () => void (c = await passes(withoutMarks, nats.url, sc.prefix, false))),
        );
        let d = 0;
        runs.d = await timed(rows, () => profiled('passes-with-marks', r > 0, async () => void (d = await passes(withMarks, nats.url, sd.prefix, true))));
        let e = 0;
        runs.e = await timed(rows, () => profiled('relay', r > 0, async () => void (e = await relayRun(relayed, nats.url, se))));
        const stored = await Promise.all([sa, sb, sc, sd, se].map(async (s) => (await jsm.streams.info(s.name)).state.messages));
        if (c !== rows || d !== rows || e !== rows || stored.some((n) => n !== rows))
          throw new Error(`round ${r}: expected ${rows} messages on every side, got passes ${c} / ${d}, relay ${e}, streams ${stored.join(' / ')}`);
        for (const s of [sa, sb, sc, sd, se]) await jsm.streams.delete(s.name);
        if (r === 0) continue;
        for (const k of ['a', 'b', 'c', 'd', 'e'] as const) sides[k].push(runs[k]);
        const last = (k: keyof typeof sides) => sides[k].at(-1)!;
        console.log(
          `round ${r}: (a) raw ${last('a').perSec}/s ${last('a').cpuUsPerMsg} µs, (b) ack publisher ${last('b').perSec}/s ${last('b').cpuUsPerMsg} µs, ` +
            `(c) passes without marks ${last('c').perSec}/s ${last('c').cpuUsPerMsg} µs, (d) passes with marks ${last('d').perSec}/s ${last('d').cpuUsPerMsg} µs, (e) relay ${last('e').perSec}/s ${last('e').cpuUsPerMsg} µs`,
        );
      } finally {
        withoutMarks.close();
        withMarks.close();
        relayed.close();
      }
    }
    await nc.close();
    const mid = (k: keyof typeof sides) => ({ perSec: median(sides[k].map((x) => x.perSec)), cpuUsPerMsg: median(sides[k].map((x) => x.cpuUsPerMsg)) });
    const a = mid('a');
    const ratio = (k: keyof typeof sides) => round(mid(k).perSec / a.perSec);
    const result = {
      bench: 'relay-floor',
      rows: o.rows,
      rounds: o.rounds,
      avgPayloadBytes: avgBytes,
      raw: a,
      ackPublisher: { ...mid('b'), ratioToRaw: ratio('b') },
      passesWithoutMarks: { ...mid('c'), ratioToRaw: ratio('c') },
      passesWithMarks: { ...mid('d'), ratioToRaw: ratio('d') },
      relay: { ...mid('e'), ratioToRaw: ratio('e') },
      perRound: sides,
    };
    console.log(`\n${o.rows} rows of ~${avgBytes} B, medians of ${o.rounds} round(s), one process; msg/s, × (a), CPU µs/msg`);
    console.log(`(a) raw js.publish                 ${String(a.perSec).padStart(7)}  1.00  ${a.cpuUsPerMsg}`);
    for (const [k, label] of [
      ['b', '(b) the relay’s publisher         '],
      ['c', '(c) relay passes, no marks        '],
      ['d', '(d) relay passes, marking sent    '],
      ['e', '(e) the relay (loop, leases)      '],
    ] as const)
      console.log(`${label}${String(mid(k).perSec).padStart(7)}  ${ratio(k).toFixed(2)}  ${mid(k).cpuUsPerMsg}`);
    console.log(`results: ${saveResult('relay-floor', result)}`);
    if (profiler) console.log(`CPU profiles of the last (c) and (d) runs: ${profiler.save().join(', ')}`);
  } finally {
    await nats[Symbol.asyncDispose]();
  }
}
