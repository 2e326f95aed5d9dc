import { trace, type Tracer } from '@opentelemetry/api';
import type { Database } from './db/open-database.ts';
import { createWriter, type Writer } from './db/writer.ts';
import type { EventRegistry } from './events/registry.ts';
import { createUuidV7 } from './ids.ts';
import type { Logger } from './logger.ts';
import { createSignal, type Signal } from './signal.ts';

/** The instrumentation scope of this template's spans. */
export const TRACER_NAME = 'hono-outbox';

/** What the command side needs; entry files and tests build it, the core never reaches for globals. */
export type Deps = {
  db: Database;
  writer: Writer;
  registry: EventRegistry;
  clock: () => Date;
  newId: () => string;
  log: Logger;
  /** Wakes the in-process relay; call after a commit that appended outbox rows. */
  outboxCommitted: Signal;
  /** Starts this process's spans (the global OpenTelemetry tracer by default: a no-op until an SDK is registered). */
  tracer: Tracer;
};

/** Deps over `db` with its own write queue, the given registry, the real clock, UUIDv7 ids and the global tracer; `over` replaces parts. */
export function createDeps(db: Database, log: Logger, registry: EventRegistry, over: Partial<Omit<Deps, 'db' | 'log' | 'registry'>> = {}): Deps {
  return {
    db,
    writer: over.writer ?? createWriter(db),
    registry,
    clock: over.clock ?? (() => new Date()),
    newId: over.newId ?? createUuidV7(),
    log,
    outboxCommitted: over.outboxCommitted ?? createSignal(),
    tracer: over.tracer ?? trace.getTracer(TRACER_NAME),
  };
}
