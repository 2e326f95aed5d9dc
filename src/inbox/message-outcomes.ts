import type { Logger } from '../logger.ts';
import { traceFields } from '../telemetry/trace-context.ts';
import { backoffDelay, type BackoffSettings } from '../worker/backoff.ts';
import type { InboxResult } from './handle-once.ts';
import type { HeldMessage } from './held-messages.ts';
import type { InboxMessage } from './inbox-message.ts';

/** What a consumer run did. */
export type ConsumerRunSummary = {
  processed: number;
  duplicates: number;
  /** Events of types the subscriber does not handle: acknowledged without an inbox row. */
  ignored: number;
  deadLettered: number;
  /** Handler failures retried in-process. */
  retried: number;
  brokerErrors: number;
  /** Batch writes that failed (database unavailable) and were retried. */
  databaseErrors: number;
};

/** A run's summary before it did anything. */
export function emptySummary(): ConsumerRunSummary {
  return { processed: 0, duplicates: 0, ignored: 0, deadLettered: 0, retried: 0, brokerErrors: 0, databaseErrors: 0 };
}

/** Messages that reached a final outcome (processed, duplicate, ignored or dead-lettered): what `maxMessages` counts. */
export function finalOutcomes(s: ConsumerRunSummary): number {
  return s.processed + s.duplicates + s.ignored + s.deadLettered;
}

/** The broker answers of a held message; each answers every copy the runner holds and lets the message go. */
export type HeldAnswers = { ack(h: HeldMessage): void; term(h: HeldMessage): void };

/** Applies the committed result of one held message: its answer, its counter, its next attempt. */
export type ApplyOutcome = (h: HeldMessage, msg: InboxMessage, result: InboxResult) => void;

const COUNTERS = { processed: 'processed', duplicate: 'duplicates', ignored: 'ignored' } as const;

/**
 * What each InboxResult means for its message, counted in `summary`: processed, duplicate and ignored are acked;
 * dead-lettered (its dead letter committed) is terminated; a handler failure (`retry`) stays held, first of its
 * aggregate, and is not taken again before a delay that grows with its attempt (`msg.deliveryCount`); deferred
 * (behind such a failure in the same write, not attempted) stays held as it was. Call only after the write committed.
 * The lines logged about a message name its span (`trace_id`, `span_id`): they are written outside its context.
 */
export function createOutcomes(
  d: { consumer: string; log: Logger; retryDelay: BackoffSettings },
  summary: ConsumerRunSummary,
  answers: HeldAnswers,
): ApplyOutcome {
  return (h, msg, result) => {
    switch (result.outcome) {
      case 'processed':
      case 'duplicate':
      case 'ignored':
        answers.ack(h);
        summary[COUNTERS[result.outcome]]++;
        break;
      case 'dead-lettered':
        answers.term(h);
        summary.deadLettered++;
        d.log.warn('consumer: message dead-lettered', {
          ...(result.span && traceFields(result.span)),
          consumer: d.consumer,
          eventId: result.eventId,
          attempts: msg.deliveryCount,
          error: result.error,
        });
        break;
      case 'retry': {
        h.failures++;
        const delay = backoffDelay(msg.deliveryCount, d.retryDelay);
        h.retryAt = Date.now() + delay;
        summary.retried++;
        d.log.warn('consumer: message failed; retrying it, the later events of its aggregate wait', {
          ...(result.span && traceFields(result.span)),
          consumer: d.consumer,
          eventId: result.eventId,
          attempt: msg.deliveryCount,
          delayMs: delay,
          error: result.error,
        });
        break;
      }
      case 'deferred':
        break;
    }
  };
}
