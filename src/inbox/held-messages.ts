import type { JsMsg } from '@nats-io/jetstream';
import { aggregateOf, toInboxMessage, type InboxMessage } from './inbox-message.ts';

/** A stream message the runner holds until it answers it: waiting for a write, retrying, or behind one that is. */
export type HeldMessage = {
  /** Every delivery of this stream message we hold (the broker may redeliver one we still hold); all get one answer. */
  copies: JsMsg[];
  /** What the inbox sees; `deliveryCount` is the highest broker delivery count among the copies. */
  msg: InboxMessage;
  /** Its aggregate, `<aggregate_type>.<aggregate_id>` (aggregateKeyOf): messages of one aggregate are applied in stream order. */
  aggregate: string;
  seq: number;
  /** Handler failures in this process; the inbox sees attempt `msg.deliveryCount + failures`. */
  failures: number;
  /** Not attempted again before this time (ms since 1970); 0 until its handler first failed. */
  retryAt: number;
  /** The incarnation of the stream the deliveries came from: 0, then 1 after it was re-created, and so on. */
  epoch: number;
};

/** The messages a runner holds, by aggregate (whatever the subject it came on), each aggregate's in stream order. */
export type HeldMessages = {
  /** Takes a delivery; a redelivery of a message already held joins it instead of queueing a second copy. */
  add(m: JsMsg, epoch: number): HeldMessage;
  size(): number;
  /**
   * Held messages that could go into the next write: not in flight, not behind a message waiting to be retried, and
   * not `blocked` nor behind a blocked one of their aggregate.
   */
  ready(now: number, blocked?: (h: HeldMessage) => boolean): number;
  /**
   * Takes up to `limit` messages for one write, in stream order: for each aggregate whose first message is due, its
   * messages from the first on, up to the first `blocked` one. The caller must settle all of them before taking again.
   */
  take(limit: number, now: number, blocked?: (h: HeldMessage) => boolean): HeldMessage[];
  /** Answered: the message leaves. */
  release(h: HeldMessage): void;
  /** Ends a write: what was taken and not released stays, first of its aggregate. */
  settle(): void;
  /** The earliest time after `now` at which an aggregate waiting for a retry becomes due. */
  nextRetryAt(now: number): number | undefined;
  /** Every held message in stream order. */
  inOrder(): HeldMessage[];
  /**
   * Tells the broker every held message of stream incarnation `epoch` is still being worked on (resets its
   * ack_wait), in stream order: after a crash they expire, and are delivered again, in that order.
   */
  keepAlive(epoch: number): void;
};

/** Stream order; a re-created stream (a later epoch) numbers its messages from 1 again, after the old one's. */
const inStreamOrder = (a: HeldMessage, b: HeldMessage) => a.epoch - b.epoch || a.seq - b.seq;

/** Creates an empty set of held messages; `prefix` (the stream's subject prefix) finds the aggregate of messages without aggregate headers. */
export function createHeldMessages(prefix?: string): HeldMessages {
  const lanes = new Map<string, HeldMessage[]>();
  let count = 0;
  const inFlight = new Set<HeldMessage>();

  const due = (lane: HeldMessage[], now: number) => lane[0]!.retryAt <= now;
  const inOrder = () => {
    const all: HeldMessage[] = [];
    for (const lane of lanes.values()) all.push(...lane);
    return all.sort(inStreamOrder);
  };

  return {
    add(m, epoch) {
      const seq = m.info.streamSequence;
      const msg = toInboxMessage(m, prefix);
      const aggregate = aggregateOf(msg);
      const lane = lanes.get(aggregate) ?? [];
      const same = lane.find((h) => h.seq === seq && h.epoch === epoch);
      if (same) {
        same.copies.push(m);
        same.msg = { ...same.msg, deliveryCount: Math.max(same.msg.deliveryCount, m.info.deliveryCount) };
        return same;
      }
      const h: HeldMessage = { copies: [m], msg, aggregate, seq, failures: 0, retryAt: 0, epoch };
      let at = lane.length;
      while (at > 0 && inStreamOrder(lane[at - 1]!, h) > 0 && !inFlight.has(lane[at - 1]!)) at--;
      lane.splice(at, 0, h);
      lanes.set(aggregate, lane);
      count++;
      return h;
    },
    size: () => count,
    ready(now, blocked) {
      let n = 0;
      for (const lane of lanes.values()) {
        if (!due(lane, now) && !inFlight.has(lane[0]!)) continue;
        for (const h of lane) {
          if (inFlight.has(h)) continue;
          if (blocked?.(h)) break;
          n++;
        }
      }
      return n;
    },
    take(limit, now, blocked) {
      const out: HeldMessage[] = [];
      for (const lane of lanes.values()) {
        if (!due(lane, now)) continue;
        if (!blocked) out.push(...lane);
        else
          for (const h of lane) {
            if (blocked(h)) break;
            out.push(h);
          }
      }
      out.sort(inStreamOrder);
      out.length = Math.min(out.length, limit);
      for (const h of out) inFlight.add(h);
      return out;
    },
    release(h) {
      const lane = lanes.get(h.aggregate);
      const at = lane?.indexOf(h) ?? -1;
      if (!lane || at < 0) return;
      lane.splice(at, 1);
      if (lane.length === 0) lanes.delete(h.aggregate);
      inFlight.delete(h);
      count--;
    },
    settle() {
      inFlight.clear();
    },
    nextRetryAt(now) {
      let next: number | undefined;
      for (const lane of lanes.values()) {
        const at = lane[0]!.retryAt;
        if (at > now && (next === undefined || at < next)) next = at;
      }
      return next;
    },
    inOrder,
    keepAlive(epoch) {
      for (const h of inOrder()) {
        if (h.epoch !== epoch) continue;
        for (const m of h.copies) {
          try {
            m.working();
          } catch {
            // the connection is away: the next beat goes out after the reconnect, or the broker delivers it again
          }
        }
      }
    },
  };
}
