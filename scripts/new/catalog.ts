// What the scaffolds read from the service as it is: its event catalog (src/modules.ts) and its contexts.
import { existsSync, readdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { EventCatalog } from '../../src/events/define-events.ts';
import type { Context } from '../../src/http/define-context.ts';
import { UsageError } from '../../src/entry/args.ts';

/** The service's event catalog, as src/modules.ts composes it (loaded from the working directory). */
export async function loadEvents(): Promise<EventCatalog> {
  const composition = (await import(pathToFileURL(resolve('src/modules.ts')).href)) as { events: EventCatalog };
  return composition.events;
}

/** The names of the contexts under src/contexts (folders with a context.ts). */
export function contextNames(): string[] {
  if (!existsSync('src/contexts')) return [];
  return readdirSync('src/contexts', { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(`src/contexts/${d.name}/context.ts`))
    .map((d) => d.name);
}

/** The context `name` (the value its context.ts exports); UsageError naming the known ones when there is none. */
export async function loadContext(name: string): Promise<Context> {
  if (!contextNames().includes(name)) {
    throw new UsageError(`unknown context ${JSON.stringify(name)}; known: ${contextNames().join(', ') || 'none'} (npm run new -- context <name> adds one)`);
  }
  const exported = (await import(pathToFileURL(resolve(`src/contexts/${name}/context.ts`)).href)) as Record<string, unknown>;
  const context = Object.values(exported).find((v): v is Context => typeof v === 'object' && v !== null && 'basePath' in v && 'events' in v && 'routes' in v);
  if (!context) throw new UsageError(`src/contexts/${name}/context.ts exports no defineContext(…) value`);
  return context;
}

/** The names of the subscribers under src/subscribers. */
export function subscriberNames(): string[] {
  if (!existsSync('src/subscribers')) return [];
  return readdirSync('src/subscribers', { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name);
}
