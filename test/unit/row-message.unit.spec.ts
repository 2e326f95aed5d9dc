import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { UnknownEventTypeError } from '../../src/events/registry.ts';
import { asciiCanonicalFields, canonicalFields, decodedCanonicalFields, headerFieldsOf, sameEvent, type StoredEvent } from '../../src/outbox/row-message.ts';
import { openedEvent } from '../support/accounts.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
import { createRandom } from '../support/random.ts';
import { storedRow } from '../support/stored-row.ts';

const registry = registryOf(fixtureModules);

describe('relay row check - the envelope prefix instead of a full parse', () => {
  it('reads type, aggregate, version and time off a row in the form appendToOutbox writes', () => {
    const event = openedEvent({ version: 7 });
    expect(canonicalFields(storedRow(event))).toEqual({
      type: 'account.opened.v1',
      aggregateType: 'account',
      aggregateId: event.aggregateId,
      aggregateVersion: 7,
      occurredAt: event.occurredAt,
    });
  });

  it('reads ids with quotes, backslashes and non-ASCII characters, written as JSON escapes them', () => {
    const event = openedEvent({ eventId: 'evt-"quoted"\\-ž-😀', accountId: 'acc-ž-😀' });
    expect(canonicalFields(storedRow(event))?.aggregateId).toBe('acc-ž-😀');
  });

  it('leaves to the full check a payload whose keys come in another order, which still publishes when it is valid', () => {
    const event = openedEvent();
    const { data, ...envelope } = registry.parse(event);
    const row = storedRow(event, { payload: JSON.stringify({ data, ...envelope }) });
    expect(canonicalFields(row)).toBeUndefined();
    expect(headerFieldsOf(row, registry)).toMatchObject({ aggregateId: event.aggregateId, aggregateVersion: 1 });
  });

  it('refuses a row whose event id or aggregate id disagrees with its payload', () => {
    const event = openedEvent();
    for (const over of [{ id: 'evt-other' }, { aggregate_id: 'acc-other' }]) {
      const row = storedRow(event, over);
      expect(canonicalFields(row)).toBeUndefined();
      expect(() => headerFieldsOf(row, registry)).toThrow('do not match');
    }
  });

  it('a row whose occurred_at column was edited is checked in full and carries the time of its payload', () => {
    const event = openedEvent();
    const row = storedRow(event, { occurred_at: Date.parse(event.occurredAt) + 1 });
    expect(canonicalFields(row)).toBeUndefined();
    expect(headerFieldsOf(row, registry).occurredAt).toBe(event.occurredAt);
  });

  it('refuses a row of an unregistered type, or of a type stored under another aggregate type', () => {
    const event = openedEvent();
    expect(() => headerFieldsOf(storedRow(event, { message_type: 'account.frozen.v1' }), registry)).toThrow(UnknownEventTypeError);
    expect(() => headerFieldsOf(storedRow(event, { aggregate_type: 'order' }), registry)).toThrow();
  });

  it('refuses a payload cut short in its envelope, a version that is no positive integer and a time that is not in UTC with milliseconds', () => {
    const event = openedEvent();
    const text = JSON.stringify(registry.parse(event));
    const broken = [
      text.slice(0, text.indexOf('"data"')),
      text.replace('"aggregateVersion":1,', '"aggregateVersion":0,'),
      text.replace('"aggregateVersion":1,', '"aggregateVersion":1.5,'),
      text.replace(event.occurredAt, event.occurredAt.replace('Z', '+00:00')),
    ];
    for (const payload of broken) {
      const row = storedRow(event, { payload });
      expect(canonicalFields(row)).toBeUndefined();
      expect(() => headerFieldsOf(row, registry)).toThrow();
    }
  });

  it('trusts the rest of the payload only on a row marked as written by appendToOutbox; an unmarked one is parsed and validated in full', () => {
    const event = openedEvent();
    const text = JSON.stringify(registry.parse(event));
    // data the schema refuses after a canonical envelope: only a row written by other means can hold it
    const payload = `${text.slice(0, text.indexOf('"data":'))}"data":{"accountId":42}}`;
    expect(headerFieldsOf(storedRow(event, { payload }), registry).aggregateId).toBe(event.aggregateId);
    expect(() => headerFieldsOf(storedRow(event, { payload, payload_validated: 0 }), registry)).toThrow();
    expect(() => headerFieldsOf(storedRow(event, { payload, payload_validated: undefined }), registry)).toThrow();
    // an unmarked row in the canonical form publishes, with the same fields as the prefix gives
    expect(headerFieldsOf(storedRow(event, { payload_validated: 0 }), registry)).toMatchObject(canonicalFields(storedRow(event))!);
  });

  it('refuses an unmarked canonical-looking payload that repeats its version or time after data with another value', () => {
    const event = openedEvent();
    const text = JSON.stringify(registry.parse(event));
    for (const tail of [',"aggregateVersion":2', `,"occurredAt":"2027-01-01T00:00:00.000Z"`]) {
      const row = storedRow(event, { payload: `${text.slice(0, -1)}${tail}}`, payload_validated: 0 });
      expect(() => headerFieldsOf(row, registry), tail).toThrow('repeats an envelope key');
    }
    // the same value repeated says nothing else
    const same = storedRow(event, { payload: `${text.slice(0, -1)},"aggregateVersion":1}`, payload_validated: 0 });
    expect(headerFieldsOf(same, registry).aggregateVersion).toBe(1);
  });

  it('refuses, in any form, an aggregate id that is no subject-safe token (a line break would end a header)', () => {
    const event = openedEvent();
    const valid = registry.parse(event);
    const id = 'acc\r\nX-Injected: 1';
    const row = storedRow(event, { aggregate_id: id, payload: JSON.stringify({ ...valid, aggregateId: id }) });
    expect(canonicalFields(row)).toBeUndefined();
    expect(() => headerFieldsOf(row, registry)).toThrow();
  });
  it('reads the envelope off its bytes only where reading the decoded text gives the same fields, whatever a byte or the time holds', () => {
    const random = createRandom(1207).next;
    const encoder = new TextEncoder();
    const agree = (row: StoredEvent) => {
      const fast = asciiCanonicalFields(row);
      if (fast !== undefined) expect(fast).toEqual(decodedCanonicalFields(row));
      return fast !== undefined;
    };
    // the common row is read off its bytes
    expect(agree(storedRow(openedEvent({ version: 12 })))).toBe(true);
    const times = [
      '2026-01-31T23:59:59.999Z',
      '2028-02-29T12:00:00.000Z',
      '2026-02-29T12:00:00.000Z',
      '2026-02-30T00:00:00.000Z',
      '2026-04-31T00:00:00.000Z',
      '2026-13-01T00:00:00.000Z',
      '2026-12-01T24:00:00.000Z',
      '2026-12-01T23:60:00.000Z',
      '0050-01-01T00:00:00.000Z',
      '0100-01-01T00:00:00.000Z',
      '9999-12-31T23:59:59.999Z',
      '2026-12-01T10:00:00.000+00:00',
      '2026-12-01T10:00:00Z',
    ];
    let fastReads = 0;
    for (let i = 0; i < 4000; i++) {
      const event = storedRow(openedEvent({ version: 1 + Math.floor(random() * 1000) }));
      let text = new TextDecoder().decode(event.payload);
      let occurredAt = event.occurred_at!;
      if (i % 4 === 0) {
        const time = times[Math.floor(random() * times.length)]!;
        text = text.replace(/"occurredAt":"[^"]*"/, `"occurredAt":"${time}"`);
        // the instant Date.UTC makes of the time's fields (a 30th of February rolls over, a year 50 is 1950), or Date.parse's
        const fields = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})Z$/.exec(time)?.slice(1).map(Number);
        const utc = fields ? Date.UTC(fields[0]!, fields[1]! - 1, fields[2]!, fields[3]!, fields[4]!, fields[5]!, fields[6]!) : Date.parse(time);
        occurredAt = (random() < 0.5 || Number.isNaN(Date.parse(time)) ? utc : Date.parse(time)) + (random() < 0.2 ? 86_400_000 : 0);
        if (Number.isNaN(occurredAt)) occurredAt = 0;
      } else if (i % 4 === 1) {
        // any time a column can hold, written as toISOString writes it
        occurredAt = Math.floor(random() * 253_402_300_800_000) - (random() < 0.1 ? 62_198_755_200_000 : 0);
        text = text.replace(/"occurredAt":"[^"]*"/, `"occurredAt":${JSON.stringify(new Date(occurredAt).toISOString())}`);
      } else if (i % 4 === 2) {
        const version = ['0', '01', '9007199254740991', '9007199254740992', '12345678901234567', '-1', '1.5', '1e3'][i % 8]!;
        text = text.replace(/"aggregateVersion":[^,]*/, `"aggregateVersion":${version}`);
      }
      let bytes = encoder.encode(text);
      if (i % 8 === 3) {
        // an id JSON escapes, or holding a character that is no ASCII, written unescaped, one byte per character
        const id = ['evt-"q"', 'evt-\\b', 'evt-é', 'evt-ÿ', 'evt-\t'][(i >> 3) % 5]!;
        text = text.replace(JSON.stringify(event.id), random() < 0.5 ? JSON.stringify(id) : `"${id}"`);
        Object.assign(event, { id });
        bytes = Uint8Array.from(text, (c) => c.charCodeAt(0) & 0xff);
      }
      // one byte of the envelope changed, or none
      if (random() < 0.7) bytes[Math.floor(random() * 240)] = Math.floor(random() * 256);
      if (agree({ ...event, payload: bytes, occurred_at: occurredAt })) fastReads++;
    }
    expect(fastReads).toBeGreaterThan(500);
    // versions just below 2^53, which appendToOutbox stores: each read as the payload holds it
    for (let version = Number.MAX_SAFE_INTEGER - 59; version <= Number.MAX_SAFE_INTEGER; version++) {
      const row = storedRow(openedEvent({ version }));
      expect(agree(row)).toBe(true);
      expect(headerFieldsOf(row, registry).aggregateVersion).toBe(version);
    }
    // the decoded comparison reads the first 2048 bytes only: an envelope reaching past them is left to the full check
    const plain = storedRow(openedEvent());
    const longId = `evt-${'x'.repeat(2040)}`;
    const longText = new TextDecoder().decode(plain.payload).replace(plain.id, longId);
    const long = { ...plain, id: longId, payload: encoder.encode(longText) };
    expect(decodedCanonicalFields(long)).toBeUndefined();
    expect(asciiCanonicalFields(long)).toBeUndefined();
  });
});

describe("relay duplicate check - whether the message a stream holds under a row's id is the row's event", () => {
  const bytes = (text: string) => new TextEncoder().encode(text);

  it('takes the same bytes, and the same event in other JSON (keys in another order, spacing), as the same event', () => {
    const event = registry.parse(openedEvent());
    const own = bytes(JSON.stringify(event));
    const { data, ...envelope } = event;
    expect(sameEvent(own, own, registry)).toBe(true);
    expect(sameEvent(bytes(JSON.stringify({ data, ...envelope }, null, 2)), own, registry)).toBe(true);
  });

  it('compares values a schema turns into objects (a Date) by the JSON they write', () => {
    const dated = { parse: (e: unknown) => ({ ...(e as object), at: new Date((e as { at: string }).at) }) } as unknown as Parameters<typeof sameEvent>[2];
    const a = bytes(JSON.stringify({ at: '2026-01-01T00:00:00.000Z' }));
    expect(sameEvent(a, bytes(JSON.stringify({ at: '2026-01-01T00:00:00.000Z', x: undefined })), dated)).toBe(true);
    expect(sameEvent(a, bytes(JSON.stringify({ at: '2027-01-01T00:00:00.000Z' })), dated)).toBe(false);
  });

  it('takes another event under the same id, bytes that are no JSON and JSON of no registered event as another message', () => {
    const event = registry.parse(openedEvent());
    const own = bytes(JSON.stringify(event));
    expect(sameEvent(bytes(JSON.stringify({ ...event, aggregateVersion: 2 })), own, registry)).toBe(false);
    expect(sameEvent(bytes(JSON.stringify({ ...event, data: { ...(event.data as object), owner: 'someone else' } })), own, registry)).toBe(false);
    expect(sameEvent(bytes('not json'), own, registry)).toBe(false);
    expect(sameEvent(bytes(JSON.stringify({ ...event, type: 'unknown.v1' })), own, registry)).toBe(false);
    expect(sameEvent(new Uint8Array([0xff, 0xfe]), own, registry)).toBe(false);
  });
});
