// Header values against the broker's deduplication. nats-server (2.9.x, the one these tests run) finds a header by
// the first occurrence of its name anywhere in the header block, and ignores it when that occurrence does not start a
// line. A Correlation-Id (any printable ASCII, from X-Correlation-Id) or an Aggregate-Id (any subject-safe token) holding
// the text "Nats-Msg-Id" ahead of the id would hide the id from the broker, and the copy a relay publishes again after a
// crash between PubAck and mark-sent would be stored twice. eventHeaders writes Nats-Msg-Id first.
import { describe, expect, it } from 'vitest';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { openedEvent } from '../support/accounts.ts';
import { createTestApp, type TestDb } from '../support/db.ts';
import type { StreamSettings } from '../../src/nats/stream-settings.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** Runs a relay that publishes the pending rows and crashes after their PubAcks, before marking them sent. */
async function publishThenCrash(t: TestDb, stream: StreamSettings): Promise<void> {
  const faults = {
    afterPubAcks() {
      throw new Error('crash after PubAck');
    },
  };
  await expect(createRelay(relayDeps(t, nats().url, { stream, faults })).run({ untilIdle: true })).rejects.toThrow('crash after PubAck');
}

const cases: Array<[string, Record<string, string>]> = [
  ['a plain X-Correlation-Id (control)', { 'X-Correlation-Id': 'corr-1' }],
  ['an X-Correlation-Id holding the text Nats-Msg-Id', { 'X-Correlation-Id': 'Nats-Msg-Id' }],
];

describe('relay - an event re-published after a crash between PubAck and mark-sent is stored once, whatever its headers carry', () => {
  it.each(cases)(
    'the copy of an event whose command came with %s is answered as a duplicate, and the stream holds the event once',
    { timeout: 30_000 },
    async (_what, requestHeaders) => {
      await using t = await createTestApp();
      const stream = ownStream('SHADOW');
      const res = await t.app.request('/accounts', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...requestHeaders },
        body: JSON.stringify({ owner: 'ann' }),
      });
      expect(res.status).toBe(201);
      await publishThenCrash(t, stream);
      expect(await readStream(nats().nc, stream)).toHaveLength(1);

      const summary = await drainOutbox(relayDeps(t, nats().url, { stream }));
      const messages = await readStream(nats().nc, stream);
      expect(messages.map((m) => m.event.eventId)).toEqual([messages[0]!.event.eventId]);
      expect(summary).toMatchObject({ published: 0, duplicates: 1 });
    },
  );

  it('the copy of an event whose aggregate id is the subject-safe token "Nats-Msg-Id" is answered as a duplicate, and the stream holds the event once', {
    timeout: 30_000,
  }, async () => {
    await using t = await createTestApp();
    const stream = ownStream('SHADOW');
    await t.deps.writer.write((tx) => appendToOutbox(tx, [openedEvent({ accountId: 'Nats-Msg-Id' })], { registry: t.deps.registry, now: new Date() }));
    await publishThenCrash(t, stream);
    const summary = await drainOutbox(relayDeps(t, nats().url, { stream }));
    expect(await readStream(nats().nc, stream)).toHaveLength(1);
    expect(summary).toMatchObject({ published: 0, duplicates: 1 });
  });
});
