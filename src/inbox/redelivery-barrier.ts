/** Holds back every message at the start of a run until the previous run's unacknowledged messages are back. */
export type RedeliveryBarrier = {
  /** Notes a delivery of stream sequence `seq`. */
  see(seq: number): void;
  isOpen(now: number): boolean;
  /** When it opens at the latest. */
  deadline: number;
};

/**
 * A process that died (or lost its connection) holding messages leaves them unacknowledged: the broker delivers
 * them again only when their ack_wait runs out, while newer messages go out at once, so a newer event of the same
 * aggregate would be applied first. Made from the consumer's state before the first pull (`expected` messages
 * awaiting acknowledgement, all at or below stream sequence `upTo`), the barrier stays closed until that many of
 * them were delivered again, or until `deadline` (some never come back: acknowledged late, or out of deliveries).
 */
export function createRedeliveryBarrier(o: { upTo: number; expected: number; deadline: number }): RedeliveryBarrier {
  const seen = new Set<number>();
  let open = o.expected <= 0;
  return {
    deadline: o.deadline,
    see(seq) {
      if (open || seq > o.upTo) return;
      seen.add(seq);
      if (seen.size >= o.expected) open = true;
    },
    isOpen(now) {
      if (!open && now >= o.deadline) open = true;
      return open;
    },
  };
}

/**
 * The same barrier in the middle of a run, when pulling failed and resumed (the connection or the consumer's server
 * went away): deliveries in flight then never arrived and come back only after ack_wait. The consumer says it
 * delivered up to stream sequence `delivered`, above the highest this run received: the barrier stays closed until
 * that message arrives again (the lost ones are redelivered oldest first), or until `deadline`.
 */
export function createLostDeliveryBarrier(o: { delivered: number; deadline: number }): RedeliveryBarrier {
  let open = false;
  return {
    deadline: o.deadline,
    see(seq) {
      if (seq >= o.delivered) open = true;
    },
    isOpen(now) {
      if (!open && now >= o.deadline) open = true;
      return open;
    },
  };
}
