// docs/migrating.md, step 3: while the legacy path still publishes each event after the commit
// (`js.publish(subject, JSON.stringify(e), { msgID: e.eventId })`, the handler's own object), the relay publishes the
// same events from the outbox under the same ids. The relay's copy is answered `duplicate`, and the relay compares the
// stored message with the row before marking it sent: the legacy JSON holds the same event with its keys in another
// order, which must count as the same event (not as an event id used twice, which would park the row and hold every
// later event of its aggregate behind it once step 4 drops the legacy publish). The same copy on another subject
// (without the relay's partition token) is not the row's event: JetStream deduplicates by id across subjects, and
// marking the row sent would leave the only copy where a partitioned subscriber (`<prefix>.account.*.<partition>`)
// never reads it, so the relay fails the row with an error naming both subjects. And when the copy was deleted since
// (an operator removing the stray message), JetStream still remembers the id: the relay fails the row too, since nothing
// shows its event reached anyone, and publishes it anew once the duplicate window has passed.
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';
import { eventSubject } from '../../src/nats/stream-settings.ts';
import { partitionOf } from '../../src/outbox/partition.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { relayDeps } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** Runs relays until no row is pending (retries and parking included), at most `runs` times. */
async function relayUntilNothingPending(t: TestDb, stream: StreamSettings, runs: number): Promise<void> {
  const deps = relayDeps(t, nats().url, { stream });
  for (let run = 0; run < runs; run++) {
    await createRelay(deps).run({ untilIdle: true, timeLimitMs: 5000 });
    const { rows } = await t.client.execute("SELECT count(*) AS n FROM outbox WHERE status = 'pending'");
    if (Number(rows[0]!.n) === 0) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('relay - migrating from a publish after commit (docs/migrating.md, step 3)', () => {
  it('an event the legacy path already published under the same id and stream is marked sent as a duplicate, and the later events of its aggregate follow', {
    timeout: 30_000,
  }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('LEGACY');
    await createStream(nats().nc, stream);
    const js = jetstream(nats().nc);
    const acc = `acc-${crypto.randomUUID()}`;
    // step 3: the handler stores its event in the outbox and the legacy path still publishes it after the commit
    const opened = openedEvent({ accountId: acc });
    await t.deps.writer.write((tx) => appendToOutbox(tx, [opened], { registry: t.deps.registry, now: new Date() }));
    await js.publish(eventSubject(stream.prefix, 'account', acc, partitionOf('account', acc, 16)), JSON.stringify(opened), { msgID: opened.eventId });
    // step 4: the legacy publish is gone; the next event of the account is only in the outbox
    const credited = creditedEvent({ accountId: acc });
    await t.deps.writer.write((tx) => appendToOutbox(tx, [credited], { registry: t.deps.registry, now: new Date() }));

    await relayUntilNothingPending(t, stream, 20);
    const rows = (await t.client.execute('SELECT id, status, last_error FROM outbox ORDER BY seq')).rows.map((r) => ({
      id: String(r.id),
      status: String(r.status),
      lastError: r.last_error === null ? null : String(r.last_error),
    }));
    expect(rows).toEqual([
      { id: opened.eventId, status: 'sent', lastError: null },
      { id: credited.eventId, status: 'sent', lastError: null },
    ]);
    expect((await readStream(nats().nc, stream)).map((m) => m.event.eventId)).toEqual([opened.eventId, credited.eventId]);
  });
});

describe('relay - a duplicate whose stored copy is on another subject', () => {
  it('a row whose event the stream holds only on another subject is not marked sent, and its last error names both subjects', {
    timeout: 30_000,
  }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('LEGSUBJ');
    await createStream(nats().nc, stream);
    const js = jetstream(nats().nc);
    const acc = `acc-${crypto.randomUUID()}`;
    const opened = openedEvent({ accountId: acc });
    await t.deps.writer.write((tx) => appendToOutbox(tx, [opened], { registry: t.deps.registry, now: new Date() }));
    // the legacy path: the handler's own object, on a subject without the partition token, with the event id
    await js.publish(`${stream.prefix}.account.${acc}`, JSON.stringify(opened), { msgID: opened.eventId });

    await relayUntilNothingPending(t, stream, 10);
    const row = (await t.client.execute('SELECT status, last_error FROM outbox')).rows[0]!;
    const rowSubject = eventSubject(stream.prefix, 'account', acc, partitionOf('account', acc, 16));
    const onRowSubject = (await readStream(nats().nc, stream)).filter((m) => m.subject === rowSubject).map((m) => m.event.eventId);
    expect({ status: row.status, onRowSubject }).toEqual({ status: 'failed', onRowSubject: [] });
    expect(String(row.last_error)).toContain(`on subject ${stream.prefix}.account.${acc} `);
    expect(String(row.last_error)).toContain(`not on ${rowSubject} `);
  });
});

describe('relay - a duplicate whose stored copy was deleted', () => {
  it('a row whose event the stream no longer holds on any subject is not marked sent, and its last error says so', { timeout: 30_000 }, async () => {
    await using t = await createTestDb();
    const stream = ownStream('DUPDEL');
    await createStream(nats().nc, stream);
    const acc = `acc-${crypto.randomUUID()}`;
    const opened = openedEvent({ accountId: acc });
    await t.deps.writer.write((tx) => appendToOutbox(tx, [opened], { registry: t.deps.registry, now: new Date() }));
    // the legacy path publishes on a subject without the partition token; an operator removes the stray copy
    const ack = await jetstream(nats().nc).publish(`${stream.prefix}.account.${acc}`, JSON.stringify(opened), { msgID: opened.eventId });
    await (await jetstreamManager(nats().nc)).streams.deleteMessage(stream.name, ack.seq);

    await relayUntilNothingPending(t, stream, 10);
    const row = (await t.client.execute('SELECT status, last_error FROM outbox')).rows[0]!;
    expect({ status: row.status, inStream: await readStream(nats().nc, stream) }).toEqual({ status: 'failed', inStream: [] });
    expect(String(row.last_error)).toContain('for a message it no longer holds');
  });
});
