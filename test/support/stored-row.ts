import { registryOf } from '../../src/compose/define-modules.ts';
import type { IntegrationEvent } from '../../src/events/integration-event.ts';
import type { StoredEvent } from '../../src/outbox/row-message.ts';
import type { TestDb } from './db.ts';
import { fixtureModules } from './fixture/modules.ts';

const registry = registryOf(fixtureModules);
const encoder = new TextEncoder();

/**
 * A row as appendToOutbox stores `event` (a fixture event): its columns, the validated event serialized as the
 * payload, and its mark; `over` replaces columns, the mark or the payload's text.
 */
export function storedRow(event: Record<string, unknown>, over: Partial<Omit<StoredEvent, 'payload'>> & { payload?: string } = {}): StoredEvent {
  const valid = registry.parse(event);
  const { payload, ...columns } = over;
  return {
    id: valid.eventId,
    aggregate_type: valid.aggregateType,
    aggregate_id: valid.aggregateId,
    message_type: valid.type,
    occurred_at: Date.parse(valid.occurredAt),
    payload: encoder.encode(payload ?? JSON.stringify(valid)),
    payload_validated: 1,
    ...columns,
  };
}

/**
 * Stores `event` in the outbox as a script or a restore would, without appendToOutbox: unmarked, pending, no partition
 * given (the relay places it); `over` replaces or adds columns (the payload's text or bytes, seq, partition, attempts …).
 */
export async function insertScriptRow(t: TestDb, event: IntegrationEvent, over: Record<string, unknown> = {}): Promise<void> {
  const cols: Record<string, unknown> = {
    id: event.eventId,
    aggregate_type: event.aggregateType,
    aggregate_id: event.aggregateId,
    message_type: event.type,
    payload: JSON.stringify(event),
    status: 'pending',
    occurred_at: Date.parse(event.occurredAt),
    available_at: 0,
    ...over,
  };
  const names = Object.keys(cols);
  await t.client.execute({
    sql: `INSERT INTO outbox (${names.join(', ')}) VALUES (${names.map((n) => (cols[n] instanceof TextBytes ? 'CAST(? AS TEXT)' : '?')).join(', ')})`,
    args: Object.values(cols).map((v) => (v instanceof TextBytes ? v.bytes : v)) as never,
  });
}

/** Bytes insertScriptRow stores as a TEXT value as they are, valid UTF-8 or not (what `CAST(x'…' AS TEXT)` stores). */
export class TextBytes {
  constructor(readonly bytes: Uint8Array) {}
}

/** `text` with `bytes` after it as a TEXT value for insertScriptRow (Latin-1 é is 0xe9, which is no UTF-8 on its own). */
export const textWithBytes = (text: string, ...bytes: number[]) => new TextBytes(new Uint8Array([...encoder.encode(text), ...bytes]));
