/** Stream messages a run must apply before any later message of their aggregate, and when it stops waiting for them. */
export type AwaitedMessages = {
  /** Notes a delivery of stream sequence `seq`: that message is no longer awaited. */
  see(seq: number): void;
  /** Whether a message of `aggregate` at stream sequence `seq` must wait: an earlier one of its aggregate is awaited. */
  holdsBack(aggregate: string, seq: number): boolean;
  /** How many are still awaited. */
  size(): number;
  /** Forgets the ones whose deadline passed by `now` and hands them back (the caller logs them). */
  expire(now: number): Array<{ seq: number; aggregate: string }>;
  /** The ones whose deadline passed by `now`, still awaited, with how many times their wait was extended. */
  due(now: number): Array<{ seq: number; aggregate: string; extensions: number }>;
  /** Extends the wait for `seqs` to `deadline` (never shortening it) and counts one more extension for each. */
  extend(seqs: number[], deadline: number): void;
  /** Forgets `seqs` (given up on). */
  forget(seqs: number[]): void;
  /** The earliest deadline of those still awaited. */
  nextDeadline(): number | undefined;
  /** Awaits `entries` too, each until `deadline` (one already awaited keeps its deadline when that is later). */
  add(entries: Array<{ seq: number; aggregate: string }>, deadline: number): void;
  /** Forgets every one at or below stream sequence `seq` (acknowledged: the broker will not deliver it again). */
  forgetUpTo(seq: number): void;
  /** The stream sequences awaited. */
  seqs(): number[];
  /** The lowest stream sequence awaited. */
  lowest(): number | undefined;
  /** Forgets every one (the stream was re-created). */
  clear(): void;
};

/**
 * An empty set of awaited messages. A message is awaited when the broker delivered it (it is unacknowledged) and
 * this run does not have it and has not applied it: a delivery lost in flight, or one an earlier run left behind.
 * The broker delivers it again once its ack_wait runs out; until then, or until it is given up on at a deadline
 * (the owner decides whether the deadline ends the wait or extends it), the later messages of its aggregate wait,
 * and every other aggregate flows.
 */
export function createAwaitedMessages(): AwaitedMessages {
  let bySeq = new Map<number, { aggregate: string; deadline: number; extensions: number }>();
  /** The lowest awaited sequence per aggregate, rebuilt when the set changes. */
  let lowest = new Map<string, number>();
  const rebuild = () => {
    lowest = new Map();
    for (const [seq, a] of bySeq) if (seq < (lowest.get(a.aggregate) ?? Number.POSITIVE_INFINITY)) lowest.set(a.aggregate, seq);
  };
  const due = (now: number) => {
    const out: Array<{ seq: number; aggregate: string; extensions: number }> = [];
    for (const [seq, a] of bySeq) if (a.deadline <= now) out.push({ seq, aggregate: a.aggregate, extensions: a.extensions });
    return out;
  };
  return {
    see(seq) {
      if (bySeq.delete(seq)) rebuild();
    },
    holdsBack(aggregate, seq) {
      const first = lowest.get(aggregate);
      return first !== undefined && first < seq;
    },
    size: () => bySeq.size,
    due,
    extend(seqs, deadline) {
      for (const seq of seqs) {
        const a = bySeq.get(seq);
        if (a) bySeq.set(seq, { ...a, deadline: Math.max(deadline, a.deadline), extensions: a.extensions + 1 });
      }
    },
    forget(seqs) {
      let changed = false;
      for (const seq of seqs) changed = bySeq.delete(seq) || changed;
      if (changed) rebuild();
    },
    expire(now) {
      const gone = due(now).map(({ seq, aggregate }) => ({ seq, aggregate }));
      if (gone.length === 0) return gone;
      for (const g of gone) bySeq.delete(g.seq);
      rebuild();
      return gone;
    },
    nextDeadline() {
      let next: number | undefined;
      for (const a of bySeq.values()) if (next === undefined || a.deadline < next) next = a.deadline;
      return next;
    },
    add(entries, deadline) {
      if (entries.length === 0) return;
      for (const e of entries) {
        const had = bySeq.get(e.seq);
        bySeq.set(e.seq, { aggregate: e.aggregate, deadline: Math.max(deadline, had?.deadline ?? deadline), extensions: had?.extensions ?? 0 });
      }
      rebuild();
    },
    forgetUpTo(seq) {
      let changed = false;
      for (const s of bySeq.keys()) if (s <= seq) changed = bySeq.delete(s) || changed;
      if (changed) rebuild();
    },
    seqs: () => [...bySeq.keys()],
    lowest() {
      let min: number | undefined;
      for (const s of bySeq.keys()) if (min === undefined || s < min) min = s;
      return min;
    },
    clear() {
      bySeq = new Map();
      lowest = new Map();
    },
  };
}
