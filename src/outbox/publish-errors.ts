import { JetStreamApiError } from '@nats-io/jetstream';

/**
 * True when a publish failed because the broker cannot take messages right now (connection lost, timeout,
 * no responders, stream full): the pass stops and attempts are not touched. Everything else is a
 * permanent error of that message.
 */
export function isBrokerUnavailable(error: unknown): boolean {
  if (error instanceof JetStreamApiError) {
    const desc = error.apiError().description ?? error.message;
    // 10077 store failed (max bytes / max messages with discard new), 10047 insufficient resources,
    // 10008 cluster not available, 10023 no stream leader.
    return [10077, 10047, 10008, 10023].includes(error.code) || /exceeded|insufficient|resources|not available|no leader/i.test(desc);
  }
  if (!(error instanceof Error)) return true;
  const name = error.name;
  if (/Timeout|NoResponders|Closed|Connection|Draining|JetStreamNotEnabled|RequestError/i.test(name)) return true;
  return /timeout|no responders|disconnect|closed|connection|not enabled/i.test(error.message);
}
