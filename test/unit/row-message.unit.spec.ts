import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { UnknownEventTypeError } from '../../src/events/registry.ts';
import { canonicalFields, headerFieldsOf, sameEvent } from '../../src/outbox/row-message.ts';
import { openedEvent } from '../support/accounts.ts';
import { fixtureModules } from '../support/fixture/modules.ts';
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
