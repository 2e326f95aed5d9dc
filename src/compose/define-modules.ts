import type { EventCatalog } from '../events/define-events.ts';
import { createEventRegistry, type EventRegistry } from '../events/registry.ts';
import type { Context } from '../http/define-context.ts';
import type { Subscriber } from '../inbox/subscriber.ts';

/** What a service is made of: its event catalog, its contexts and its subscribers. */
export type Modules = {
  events: EventCatalog;
  contexts: readonly Context[];
  subscribers: readonly Subscriber[];
};

/** Thrown for a subscriber name nobody registered; the message lists the known ones. */
export class UnknownSubscriberError extends Error {
  override readonly name = 'UnknownSubscriberError';
}

/**
 * Checks a composition: unique context and subscriber names, every event a subscriber handles registered, and
 * context events that do not redefine one another. Throws RangeError naming the problem. The catalog keeps its
 * literal type; the lists are typed as lists, so an empty composition (`contexts: []`) is as usable as a full one.
 */
export function defineModules<const E extends EventCatalog>(modules: Modules & { events: E }): Modules & { events: E } {
  const seen = new Set<string>();
  for (const name of [...modules.contexts.map((c) => `context ${c.name}`), ...modules.subscribers.map((s) => `subscriber ${s.name}`)]) {
    if (seen.has(name)) throw new RangeError(`${name} is listed twice`);
    seen.add(name);
  }
  for (const s of modules.subscribers) {
    if (!/^[A-Za-z0-9_-]+$/.test(s.name)) throw new RangeError(`subscriber name ${JSON.stringify(s.name)} must be letters, digits, - and _`);
    for (const t of s.types)
      if (!Object.hasOwn(modules.events, t)) throw new RangeError(`subscriber ${s.name} handles ${t}, which is not in the event catalog`);
  }
  return modules;
}

/** The registry of a composition's event catalog. */
export function registryOf(modules: Pick<Modules, 'events'>): EventRegistry {
  return createEventRegistry(modules.events);
}

/** The subscriber called `name`; throws UnknownSubscriberError otherwise. */
export function findSubscriber(modules: Pick<Modules, 'subscribers'>, name: string): Subscriber {
  const found = modules.subscribers.find((s) => s.name === name);
  if (!found) throw new UnknownSubscriberError(`Unknown subscriber ${JSON.stringify(name)}; known: ${modules.subscribers.map((s) => s.name).join(', ')}`);
  return found;
}
