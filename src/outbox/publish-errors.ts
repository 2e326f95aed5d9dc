import { JetStreamApiError } from '@nats-io/jetstream';

/** JetStream API error codes (nats-server errors.json) of a broker that cannot store the message now. */
const UNAVAILABLE_CODES = new Set([
  10004, // incomplete results (503)
  10007, // JetStream cluster not assigned to this server
  10008, // JetStream system temporarily unavailable (503): no meta leader, no quorum
  10009, // JetStream cluster can not handle request: asked a node that is no longer the leader
  10023, // insufficient resources (503)
  10047, // insufficient storage resources available
  10077, // store failed (503): max bytes / max messages with discard new
  10118, // stream is offline
]);

/**
 * True when a publish failed because the broker cannot take messages right now: connection lost or closed, a
 * timeout, no responders (what a stream without a leader answers during an election, surfaced by the client as
 * JetStreamNotEnabled), a JetStream 503 or "temporarily unavailable" (no meta leader, no quorum), a full stream. The
 * pass stops, attempts are not touched and the row is published again with the same Nats-Msg-Id. Everything else
 * is a permanent error of that message.
 */
export function isBrokerUnavailable(error: unknown): boolean {
  if (error instanceof JetStreamApiError) {
    return (
      error.status === 503 ||
      UNAVAILABLE_CODES.has(error.code) ||
      /unavailable|exceeded|insufficient|resources|offline|not available|no leader|not leader/i.test(error.apiError().description ?? error.message)
    );
  }
  if (!(error instanceof Error)) return true;
  // a JetStreamStatusError (pull requests) carries the status as `code`
  if (error.name === 'JetStreamStatusError' && (error as { code?: unknown }).code === 503) return true;
  if (/Timeout|NoResponders|Closed|Connection|Draining|JetStreamNotEnabled|RequestError/i.test(error.name)) return true;
  return /timeout|no responders|disconnect|closed|connection|not enabled|temporarily unavailable/i.test(error.message);
}
