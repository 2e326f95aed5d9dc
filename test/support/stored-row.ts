import { registryOf } from '../../src/compose/define-modules.ts';
import type { StoredEvent } from '../../src/outbox/row-message.ts';
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
