// docs/migrating.md, step 3, with the legacy publish going into the same stream under the same Nats-Msg-Id but on
// another subject (without the relay's partition token). JetStream deduplicates by id across subjects, so the relay's
// copy is answered `duplicate`, and the legacy JSON (another key order) parses to the same event. Marking the row sent
// would leave the only copy where a partitioned subscriber (`<prefix>.account.*.<partition>`) never reads it: the
// relay compares the stored message's subject too, and fails the row with an error naming both subjects.
import { jetstream } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';
import { eventSubject } from '../../src/nats/stream-settings.ts';
import { partitionOf } from '../../src/outbox/partition.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { openedEvent } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { relayDeps } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

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

    const deps = relayDeps(t, nats().url, { stream });
    for (let run = 0; run < 10; run++) {
      await createRelay(deps).run({ untilIdle: true, timeLimitMs: 5000 });
      const { rows } = await t.client.execute("SELECT count(*) AS n FROM outbox WHERE status = 'pending'");
      if (Number(rows[0]!.n) === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const row = (await t.client.execute('SELECT status, last_error FROM outbox')).rows[0]!;
    const rowSubject = eventSubject(stream.prefix, 'account', acc, partitionOf('account', acc, 16));
    const onRowSubject = (await readStream(nats().nc, stream)).filter((m) => m.subject === rowSubject).map((m) => m.event.eventId);
    expect({ status: row.status, onRowSubject }).toEqual({ status: 'failed', onRowSubject: [] });
    expect(String(row.last_error)).toContain(`on subject ${stream.prefix}.account.${acc} `);
    expect(String(row.last_error)).toContain(`not on ${rowSubject} `);
  });
});
