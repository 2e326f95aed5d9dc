import { describe, expect, it } from 'vitest';
import { registryOf } from '../../src/compose/define-modules.ts';
import { UnknownEventTypeError } from '../../src/events/registry.ts';
import { canonicalFields, headerFieldsOf, type StoredEvent } from '../../src/outbox/row-message.ts';
import { openedEvent } from '../support/accounts.ts';
import { fixtureModules } from '../support/fixture/modules.ts';

const registry = registryOf(fixtureModules);
const encoder = new TextEncoder();

/** A row as appendToOutbox stores `event`: its columns, and the validated event serialized as the payload. */
function storedRow(event: Record<string, unknown>, over: Partial<Omit<StoredEvent, 'payload'>> & { payload?: string } = {}): StoredEvent {
  const valid = registry.parse(event);
  const { payload, ...columns } = over;
  return {
    id: valid.eventId,
    aggregate_type: valid.aggregateType,
    aggregate_id: valid.aggregateId,
    message_type: valid.type,
    occurred_at: Date.parse(valid.occurredAt),
    payload: encoder.encode(payload ?? JSON.stringify(valid)),
    ...columns,
  };
}

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

  it('refuses, in any form, an aggregate id that is no subject-safe token (a line break would end a header)', () => {
    const event = openedEvent();
    const valid = registry.parse(event);
    const id = 'acc\r\nX-Injected: 1';
    const row = storedRow(event, { aggregate_id: id, payload: JSON.stringify({ ...valid, aggregateId: id }) });
    expect(canonicalFields(row)).toBeUndefined();
    expect(() => headerFieldsOf(row, registry)).toThrow();
  });
});
