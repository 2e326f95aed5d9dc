import { handleBatch, type InboxDeps, type InboxResult } from './handle-once.ts';
import type { InboxMessage } from './inbox-message.ts';

/**
 * Applies a batch exactly as handleBatch does (decoding, validation, spans, metrics, dead letters, one write, the
 * handler in order) but WITHOUT the inbox claim, so a redelivered event takes effect twice. Never use it in a service:
 * it exists as the baseline of the consume benchmark and as the broken variant the torture checker must catch.
 */
export function applyWithoutInbox(deps: InboxDeps): (msgs: InboxMessage[]) => Promise<InboxResult[]> {
  return (msgs) => handleBatch(deps, msgs, { withoutInbox: true });
}
