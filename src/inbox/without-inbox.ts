import type { Writer } from '../db/writer.ts';
import type { EventRegistry } from '../events/registry.ts';
import type { InboxResult } from './handle-once.ts';
import type { InboxMessage } from './inbox-message.ts';
import { silentLogger } from '../logger.ts';
import type { SubscriberHandler } from './subscriber.ts';

/**
 * Applies a batch with the same decoding, validation and single write as the inbox path but WITHOUT the inbox
 * claim, so a redelivered event takes effect twice. Never use it in a service: it exists as the baseline of the
 * consume benchmark and as the broken variant the torture checker must catch.
 */
export function applyWithoutInbox(writer: Writer, registry: EventRegistry, handle: SubscriberHandler) {
  return async (msgs: Array<Pick<InboxMessage, 'payload'>>): Promise<InboxResult[]> => {
    const events = msgs.map((m) => registry.parse(JSON.parse(m.payload)));
    await writer.write(async (tx) => {
      for (const e of events) await handle(tx, e, { log: silentLogger });
    });
    return events.map((e) => ({ outcome: 'processed', eventId: e.eventId }));
  };
}
