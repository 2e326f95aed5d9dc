import type { Tx } from '../db/open-database.ts';
import type { IntegrationEvent } from '../events/integration-event.ts';

/**
 * Applies one registry-validated event to the subscriber's database. Runs inside the inbox transaction (or a
 * savepoint of it) and must do database work only: a throw rolls back its writes and the inbox row together.
 * Types the subscriber does not care about should be ignored, not thrown on.
 */
export type SubscriberHandler = (tx: Tx, event: IntegrationEvent) => Promise<void>;

/** A named subscriber: its durable consumer, the aggregate types it listens to, and its effect. */
export type Subscriber = {
  /** Durable consumer name and inbox `consumer` column; letters, digits, `-` and `_`. */
  name: string;
  /** Each becomes a filter `<prefix>.<aggregate_type>.>` of its consumer. */
  aggregateTypes: string[];
  handle: SubscriberHandler;
};
