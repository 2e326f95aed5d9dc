import type { Counter, Metrics } from '../metrics/metrics.ts';

/** The inbox counters of DESIGN.md §7; every increment carries `{consumer}`. */
export type InboxMetrics = { processed: Counter; duplicates: Counter; deadLetters: Counter };

/** Registers (or returns the already registered) inbox counters; several runners may share one registry. */
export function createInboxMetrics(metrics: Metrics): InboxMetrics {
  return {
    processed: metrics.counter('inbox_processed_total', 'Events applied by a subscriber (inbox row and effect committed).'),
    duplicates: metrics.counter('inbox_duplicates_total', 'Deliveries recognised by the inbox as already applied, and acknowledged.'),
    deadLetters: metrics.counter('inbox_dead_letters_total', 'Messages a subscriber stored as dead letters and terminated.'),
  };
}
