import type { Hono } from 'hono';
import type { Database, Tx } from '../db/open-database.ts';
import type { EventCatalog, EventOf } from '../events/define-events.ts';
import type { IntegrationEvent } from '../events/integration-event.ts';
import type { EventRegistry } from '../events/registry.ts';
import { type Logger, silentLogger } from '../logger.ts';

/**
 * Applies one registry-validated event to the subscriber's database. Runs inside the inbox transaction and must do
 * database work only: a throw rolls back its writes and the inbox row together.
 */
export type SubscriberHandler = (tx: Tx, event: IntegrationEvent, ctx?: HandlerContext) => Promise<void>;

/** What a handler gets besides the transaction and the event. */
export type HandlerContext = {
  /** The subscriber's logger, every line carrying the trace_id/span_id of the event's CONSUMER span. */
  log: Logger;
};

/** A subscriber as the core runs it: its durable consumer, the event types it applies and its effect. */
export type Subscriber = {
  /** Durable consumer name and inbox `consumer` column; letters, digits, `-` and `_`. */
  name: string;
  /** The event types it applies. Its consumer's filters cover their aggregate types; other types arriving there are acknowledged untouched. */
  types: readonly string[];
  /** Applies an event of one of `types`. */
  handle: SubscriberHandler;
  /** Read routes over its own database, mounted at `basePath` by the process that runs it. */
  routes?: (db: Database) => Hono<any, any, any>;
  basePath?: `/${string}`;
};

/** One handler per event type the subscriber applies, each given `event.data` typed by the registry's schema. */
export type Handlers<C extends EventCatalog> = { [T in keyof C & string]?: (tx: Tx, event: EventOf<C, T>, ctx: HandlerContext) => Promise<void> };

/** A subscriber as written: its name, its typed handlers and optional read routes. */
export type SubscriberDefinition<C extends EventCatalog> = {
  name: string;
  on: Handlers<C>;
  routes?: (db: Database) => Hono<any, any, any>;
  basePath?: `/${string}`;
};

/**
 * Declares a subscriber typed from the catalog `C`: `defineSubscriber<AppEvents>()({ name, on: { 'order.placed.v1':
 * (tx, event) => … } })`. Only the types in `on` are applied (and get an inbox row); its consumer's filters are
 * derived from them.
 */
export function defineSubscriber<C extends EventCatalog>() {
  return (definition: SubscriberDefinition<C>): Subscriber => {
    const on = definition.on as Record<string, ((tx: Tx, event: IntegrationEvent, ctx: HandlerContext) => Promise<void>) | undefined>;
    const types = Object.keys(on).filter((t) => on[t] !== undefined);
    if (types.length === 0) throw new RangeError(`subscriber ${definition.name} handles no event type`);
    return {
      name: definition.name,
      types,
      handle: (tx, event, ctx = { log: silentLogger }) => {
        const handler = on[event.type];
        if (!handler) throw new Error(`subscriber ${definition.name} does not handle ${event.type}`);
        return handler(tx, event, ctx);
      },
      ...(definition.routes ? { routes: definition.routes } : {}),
      ...(definition.basePath ? { basePath: definition.basePath } : {}),
    };
  };
}

/** The aggregate types of the events `subscriber` applies (its consumer's filters); throws for an unregistered type. */
export function subscriberAggregates(subscriber: Pick<Subscriber, 'types'>, registry: EventRegistry): string[] {
  return [...new Set(subscriber.types.map((t) => registry.aggregateOf(t)))];
}
