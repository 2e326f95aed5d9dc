import type { Hono } from 'hono';
import type { Deps } from '../deps.ts';
import type { EventCatalog } from '../events/define-events.ts';

/**
 * A bounded context of the command side: the events it publishes (its registry entries), and its routes, mounted
 * at `basePath` by the api role. Its tables live in `src/contexts/<name>/tables.ts`, where `npm run db:generate`
 * finds them for the service's migrations.
 */
export type Context = {
  name: string;
  basePath: `/${string}`;
  events: EventCatalog;
  routes(deps: Deps): Hono<any, any, any>;
};

/** Declares a context (a typed identity: the composition in src/modules.ts lists it). */
export function defineContext<const C extends Context>(context: C): C {
  return context;
}
