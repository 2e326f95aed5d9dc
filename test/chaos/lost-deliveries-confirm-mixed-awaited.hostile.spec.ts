import { jetstream, type JsMsg } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { eventually } from '../support/eventually.ts';
import { appliedEvents, recorder, recordingDb } from '../support/recording-subscriber.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { sharedDurableRun } from '../support/shared-durable-run.ts';
import { useNats } from '../support/use-nats.ts';

// A failing event P of another aggregate, held first-hand by the run, keeps the ack floor below everything here.
// (1) The run awaits a1 (another puller acknowledged it: never delivered again) and b1 (another puller holds it and
// keeps it alive). b2 must not be applied while b1 is held elsewhere; once b1 is handed back, b1 then b2 are
// applied, and a2 goes on within a few waits.
// (2) Another puller acknowledged a1 and holds X, an event of a type the subscriber ignores, alive; then it dies
// (keeps X alive no more). X reaches the run, which acknowledges it: a2 goes on within a few waits.

const nats = useNats();

async function runWith(name: string, types?: string[]) {
  const ackWaitMs = 3000; // one wait: 5.5 s of pulling
  const stream = await freshStream(nats().nc, name.toUpperCase());
  const sdb = await recordingDb();
  const tag = `${process.pid}-${Date.now()}`;
  const p = `${name}-poison-${tag}`;
  const sub = recorder(name, types, { failingFor: p });
  const run = await sharedDurableRun(nats().url, sdb, sub, stream, { ackWaitMs, timeLimitMs: 58_000 });
  const { info, lines, other } = run;
  const keepAlives: Array<ReturnType<typeof setInterval>> = [];
  const warm = openedEvent({ accountId: `${name}-w-${tag}` });
  await publishEvents(nats().nc, stream, [warm, openedEvent({ accountId: p })]);
  await eventually(async () => (await appliedEvents(sdb)).length === 1, { what: 'the first event applied' });
  await eventually(async () => lines.some((l) => l.includes('message failed')), { what: 'the run failing P, holding it' });
  const durable = await jetstream(other).consumers.get(stream.name, name);
  return {
    ackWaitMs,
    stream,
    sdb,
    info,
    lines,
    tag,
    durable,
    waits: () => lines.filter((l) => /waiting for messages|stopped waiting/.test(l)),
    pulling: (on: boolean) => (run.pulling = on),
    keepAlive(m: JsMsg) {
      const t = setInterval(() => m.working(), ackWaitMs / 4);
      keepAlives.push(t);
      return () => clearInterval(t);
    },
    async [Symbol.asyncDispose]() {
      for (const t of keepAlives) clearInterval(t);
      await run[Symbol.asyncDispose]();
      sdb.close();
    },
  };
}

describe('lost deliveries - confirm with several awaited messages of different fates', () => {
  it('holds b2 back while b1 is held elsewhere though a1 was acknowledged, then applies b1, b2 and a2', async () => {
    await using t = await runWith('confirmmixed');
    const [a1, a2] = [openedEvent({ accountId: `mixed-a-${t.tag}` }), creditedEvent({ accountId: `mixed-a-${t.tag}`, version: 2 })];
    const [b1, b2] = [openedEvent({ accountId: `mixed-b-${t.tag}` }), creditedEvent({ accountId: `mixed-b-${t.tag}`, version: 2 })];
    t.pulling(false);
    await eventually(async () => (await t.info()).num_waiting === 0, { what: 'no pull request of the run left' });
    await publishEvents(nats().nc, t.stream, [a1, b1]);
    const a1Msg = (await t.durable.next({ expires: 2000 })) as JsMsg;
    const b1Msg = (await t.durable.next({ expires: 2000 })) as JsMsg;
    expect([a1Msg.headers?.get('Nats-Msg-Id'), b1Msg.headers?.get('Nats-Msg-Id')]).toEqual([a1.eventId, b1.eventId]);
    await a1Msg.ackAck();
    const release = t.keepAlive(b1Msg);
    t.pulling(true);
    await publishEvents(nats().nc, t.stream, [a2, b2]);
    await eventually(async () => (await t.info()).num_ack_pending === 4, { what: 'P, a2, b2 (run) and b1 (elsewhere) unacknowledged' });

    await new Promise((r) => setTimeout(r, 13_000)); // two waits and more
    const early = await appliedEvents(t.sdb);
    expect(early.includes(b2.eventId), `b2 applied while b1 was held elsewhere:\n${t.waits().join('\n')}`).toBe(false);

    release();
    b1Msg.nak();
    await eventually(async () => (await appliedEvents(t.sdb)).includes(b2.eventId), { timeoutMs: 5000, what: 'b1 and b2 applied' });
    await eventually(async () => (await appliedEvents(t.sdb)).includes(a2.eventId), { timeoutMs: 18_000, what: 'a2 applied' }).catch(() => undefined);
    const applied = await appliedEvents(t.sdb);
    expect(applied.indexOf(b1.eventId)).toBeLessThan(applied.indexOf(b2.eventId));
    expect(applied.indexOf(b1.eventId)).toBeGreaterThan(-1);
    expect(applied.includes(a2.eventId), `a2 still held back after b1 came home:\n${t.waits().join('\n')}`).toBe(true);
    console.log(`early: ${early.length} applied; waits:\n${t.waits().join('\n')}`);
  }, 60_000);

  it('applies a2 within a few waits once an event of an ignored type, held alive elsewhere, reaches the run', async () => {
    await using t = await runWith('confirmignored', ['account.opened.v1']);
    const [a1, a2] = [openedEvent({ accountId: `ign-a-${t.tag}` }), openedEvent({ accountId: `ign-a-${t.tag}`, version: 2 })];
    const x = creditedEvent({ accountId: `ign-x-${t.tag}` }); // a type the subscriber ignores
    t.pulling(false);
    await eventually(async () => (await t.info()).num_waiting === 0, { what: 'no pull request of the run left' });
    await publishEvents(nats().nc, t.stream, [x, a1]);
    const xMsg = (await t.durable.next({ expires: 2000 })) as JsMsg;
    const a1Msg = (await t.durable.next({ expires: 2000 })) as JsMsg;
    expect([xMsg.headers?.get('Nats-Msg-Id'), a1Msg.headers?.get('Nats-Msg-Id')]).toEqual([x.eventId, a1.eventId]);
    await a1Msg.ackAck();
    const die = t.keepAlive(xMsg);
    t.pulling(true);
    await publishEvents(nats().nc, t.stream, [a2]);
    await eventually(async () => (await t.info()).num_ack_pending === 3, { what: 'P, a2 (run) and X (elsewhere) unacknowledged' });
    await new Promise((r) => setTimeout(r, 7000)); // a wait runs out while X is held elsewhere

    die(); // the other puller dies: X reaches the run after its ack_wait, and is acknowledged there (ignored)
    const diedAt = Date.now();
    await eventually(async () => (await t.info()).num_ack_pending === 2, { timeoutMs: 8000, what: 'X acknowledged by the run' });
    await eventually(async () => (await appliedEvents(t.sdb)).includes(a2.eventId), { timeoutMs: 20_000, what: 'a2 applied' }).catch(() => undefined);
    const tookMs = Date.now() - diedAt;
    expect((await appliedEvents(t.sdb)).includes(a2.eventId), `a2 still held back ${tookMs} ms after X reached the run:\n${t.waits().join('\n')}`).toBe(true);
    console.log(`a2 applied ${tookMs} ms after the other puller died; waits:\n${t.waits().join('\n')}`);
  }, 60_000);
});
