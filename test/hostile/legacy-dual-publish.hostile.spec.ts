// docs/migrating.md, step 3: while the legacy path still publishes each event after the commit
// (`js.publish(subject, JSON.stringify(e), { msgID: e.eventId })`, the handler's own object), the relay publishes the
// same events from the outbox under the same ids. The relay's copy is answered `duplicate`, and the relay compares the
// stored message with the row before marking it sent: the legacy JSON holds the same event with its keys in another
// order, which must count as the same event (not as an event id used twice, which would park the row and hold every
// later event of its aggregate behind it once step 4 drops the legacy publish).
import { jetstream } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';
import { eventSubject } from '../../src/nats/stream-settings.ts';
import { partitionOf } from '../../src/outbox/partition.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { creditedEvent, openedEvent } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { relayDeps } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

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

    const deps = relayDeps(t, nats().url, { stream });
    for (let run = 0; run < 20; run++) {
      await createRelay(deps).run({ untilIdle: true, timeLimitMs: 5000 });
      const { rows } = await t.client.execute("SELECT count(*) AS n FROM outbox WHERE status = 'pending'");
      if (Number(rows[0]!.n) === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
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
