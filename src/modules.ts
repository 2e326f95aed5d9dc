// The composition point: the contexts this service runs, the events they publish and the subscribers it runs.
// Adding a context or a subscriber is one line here; removing the example is deleting its lines and its folders.
import { orders } from './contexts/orders/context.ts';
import { defineEvents } from './events/define-events.ts';
import { defineModules } from './compose/define-modules.ts';
import { notifications } from './subscribers/notifications/subscriber.ts';
import { reporting } from './subscribers/reporting/subscriber.ts';

/** Every event type this service may store, publish and apply (the registry): each context's published events. */
export const events = defineEvents({ ...orders.events });

/** The catalog's type: subscribers take their handlers' event types from it (`defineSubscriber<AppEvents>()`). */
export type AppEvents = typeof events;

/** The service: its contexts (command side) and subscribers, by name. */
export const modules = defineModules({ events, contexts: [orders], subscribers: [reporting, notifications] });
