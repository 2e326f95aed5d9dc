import type { Database } from './db/open-database.ts';
import type { Writer } from './db/writer.ts';
import type { EventRegistry } from './events/registry.ts';
import type { Logger } from './logger.ts';
import type { Signal } from './signal.ts';

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
};
