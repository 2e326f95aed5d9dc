// Outbox rows written by a script (payload_validated = 0): what the relay marks `sent` must be what the stream holds.
// The broker drops a message whose Nats-Msg-Id it already holds (its duplicate window) and answers `duplicate`; the
// relay marks the row sent on that answer. So a row must only be marked sent on a duplicate when the stream holds
// THAT event, and the bytes the relay publishes must be the JSON it validated (valid UTF-8, no BOM), since every
// reader decodes them. Real libSQL file, real nats-server.
import { jetstreamManager } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import { openedEvent } from '../support/accounts.ts';
import { createTestDb, type TestDb } from '../support/db.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { insertScriptRow } from '../support/stored-row.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** Stores `event` as a script would, with `payload` text or bytes. */
const insertWithPayload = (t: TestDb, event: IntegrationEvent, payload: string | Uint8Array = JSON.stringify(event)) => insertScriptRow(t, event, { payload });

const statusOf = async (t: TestDb, id: string) => (await t.client.execute({ sql: 'SELECT status FROM outbox WHERE id = ?', args: [id] })).rows[0]!.status;

/** The raw bodies in the stream, in order. */
async function rawBodies(stream: ReturnType<typeof ownStream>): Promise<Uint8Array[]> {
  const jsm = await jetstreamManager(nats().nc);
  const info = await jsm.streams.info(stream.name);
  const out: Uint8Array[] = [];
  for (let seq = info.state.first_seq; info.state.messages > 0 && seq <= info.state.last_seq; seq++)
    out.push((await jsm.streams.getMessage(stream.name, { seq }))!.data);
  return out;
}

describe('relay - a row is marked sent only when the stream holds its event', () => {
  it('a row reusing the id of an event the stream already holds, with other content, is not marked sent', async () => {
    await using t = await createTestDb();
    const stream = ownStream('DEDUP');
    const id = `evt-${crypto.randomUUID()}`;
    await insertWithPayload(t, openedEvent({ owner: 'original', eventId: id }));
    await drainOutbox(relayDeps(t, nats().url, { stream }));
    // compaction (or an operator) deleted the sent row; a script stores another event under the same id, inside the window
    await t.client.execute({ sql: 'DELETE FROM outbox WHERE id = ?', args: [id] });
    const other = openedEvent({ owner: 'other', eventId: id });
    await insertWithPayload(t, other);
    await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
    const held = (await readStream(nats().nc, stream)).map((m) => m.event);
    expect(held.map((e) => (e.data as { owner: string }).owner)).toEqual(['original']);
    // the broker answered `duplicate` for a message it does not hold: the row's event is in no stream
    expect(await statusOf(t, id), 'marked sent although the stream holds another event under its id').not.toBe('sent');
  });

  it('a row whose id differs from a published one only by a leading space is published, or refused, never marked sent unpublished', async () => {
    await using t = await createTestDb();
    const stream = ownStream('DEDUP');
    const id = `evt-${crypto.randomUUID()}`;
    const first = openedEvent({ owner: 'first', eventId: id });
    const second = openedEvent({ owner: 'second', eventId: ` ${id}` });
    await insertWithPayload(t, first);
    await insertWithPayload(t, second);
    await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
    const inStream = (await readStream(nats().nc, stream)).map((m) => m.event.eventId);
    expect(inStream).toContain(id);
    if ((await statusOf(t, second.eventId)) === 'sent')
      expect(inStream, 'marked sent, but the broker dropped it as a duplicate of another id').toContain(second.eventId);
  });
});

describe('relay - a script payload is published only as the valid UTF-8 JSON the relay validated', () => {
  const encoder = new TextEncoder();
  const CASES: Array<[string, (json: string) => Uint8Array]> = [
    [
      'an invalid UTF-8 byte inside a string',
      (json) => {
        const bytes = encoder.encode(json);
        bytes[json.indexOf('OWNER')] = 0xff;
        return bytes;
      },
    ],
    ['a UTF-8 byte order mark before the JSON', (json) => new Uint8Array([0xef, 0xbb, 0xbf, ...encoder.encode(json)])],
  ];
  for (const [what, bytesOf] of CASES) {
    it(`a payload with ${what} is parked, not published as bytes a reader decodes into another event`, async () => {
      await using t = await createTestDb();
      const stream = ownStream('BYTES');
      const event = openedEvent({ owner: 'OWNER' });
      await insertWithPayload(t, event, bytesOf(JSON.stringify(event)));
      await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
      const strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
      for (const body of await rawBodies(stream)) expect(() => JSON.parse(strict.decode(body)), 'the stream holds a body that is not UTF-8 JSON').not.toThrow();
      expect(await statusOf(t, event.eventId)).toBe('failed');
    });
  }

  it('control: payloads that are no event (a number, null, a raw NUL byte, an escaped NUL) are parked, and equivalent non-canonical JSON is published as stored', async () => {
    await using t = await createTestDb();
    const stream = ownStream('BYTES');
    const refused: Array<[IntegrationEvent, string | Uint8Array]> = [];
    for (const payload of [(): string => '5', (): string => 'null']) refused.push([openedEvent({ owner: 'x' }), payload()]);
    const nul = openedEvent({ owner: 'o-dd' });
    refused.push([nul, encoder.encode(JSON.stringify(nul).replace('o-dd', 'o\u0000dd'))]);
    const escaped = openedEvent({ owner: 'o-dd' });
    refused.push([escaped, JSON.stringify(escaped).replace('o-dd', 'o\\u0000dd')]);
    for (const [event, payload] of refused) await insertWithPayload(t, event, payload);
    const spaced = openedEvent({ owner: 'spaced' });
    const { data, ...envelope } = spaced;
    const spacedText = JSON.stringify({ data, ...envelope }, null, 2);
    await insertWithPayload(t, spaced, spacedText);
    await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
    for (const [event] of refused) expect(await statusOf(t, event.eventId)).toBe('failed');
    expect((await rawBodies(stream)).map((b) => new TextDecoder().decode(b))).toEqual([spacedText]);
  });
});
