import { type ConsumerInfo, JetStreamApiError } from '@nats-io/jetstream';
import type { Logger } from '../logger.ts';
import { isPermissionViolation } from '../nats/permission-violation.ts';
import { createAwaitedMessages } from './awaited-messages.ts';
import { describeError } from './handle-once.ts';
import { aggregateOf, type InboxMessage } from './inbox-message.ts';
import type { RangeEntry } from './stream-range.ts';

/** The stream's consumer limit reached (the server's JSMaximumConsumersLimitErr): a check cannot create its reader until an operator acts. */
const MAXIMUM_CONSUMERS_LIMIT = 10026;
const isConsumerLimit = (error: unknown) => error instanceof JetStreamApiError && error.code === MAXIMUM_CONSUMERS_LIMIT;

/** How many times a run asks the consumer before a wait that ran out goes on, and how far apart. */
const CONFIRM_ASKS = 3;
const CONFIRM_SPACING_MS = 250;
/** How many more waits a message gets while the broker holds messages unacknowledged outside the run. */
export const MAX_WAIT_EXTENSIONS = 3;

/** What the guard asks of the run and of the broker. */
export type MissingDeliveriesDeps = {
  consumer: string;
  log: Logger;
  /**
   * How long one wait for a message lasts, counted only while the run has a pull request out (a redelivery reaches
   * it through one): past the consumer's ack_wait, by when the broker has usually delivered it again. When it runs
   * out, the run asks the broker whether the message can still come (see createMissingDeliveries).
   */
  giveUpMs: number;
  /** The consumer's current state, from the broker. */
  consumerInfo(): Promise<ConsumerInfo>;
  /** The consumer's stream messages with sequence in (after, upTo], a page at a time (readStreamRange). */
  readRange(after: number, upTo: number, page: (entries: RangeEntry[]) => Promise<void>): Promise<boolean>;
  /** Rejects when the stream cannot be read as readRange does (checked once, when the first pull session begins). */
  probe(): Promise<void>;
  /** The stream sequences the run holds now. */
  heldSeqs(): Set<number>;
  /**
   * The stream sequences the run holds that no other puller can have answered: first delivered to this run (a copy
   * with delivery count 1) and kept alive since without a lapse the broker could have taken for the end of its
   * ack_wait. Another puller may have acknowledged a message the run got as a redelivery, or one whose keep-alives
   * came late, through another delivery.
   */
  heldFirstHand(): Set<number>;
  /** The highest stream sequence the run received. */
  highestReceived(): number;
  /** The id a message would leave in the inbox or the dead letters, or undefined when it is one the subscriber ignores. */
  recordedAs(msg: InboxMessage): string | undefined;
  /** Of `eventIds`, those the subscriber applied or dead-lettered already (its inbox and dead letters). */
  applied(eventIds: string[]): Promise<Set<string>>;
  /** Called when a check ended or a wait may have run out: the write loop looks again. */
  changed(): void;
  /** Aborts a check's waits when the run stops. */
  signal: AbortSignal;
};

/** Keeps a run's writes in per-aggregate stream order when deliveries went missing (see createMissingDeliveries). */
export type MissingDeliveries = {
  /** A pull session began (the run's start, or pulling resumed after it failed); `restarted`: the stream is a new one. */
  session(info: ConsumerInfo, restarted: boolean): void;
  /** A delivery arrived: stream sequence and the consumer's delivery sequence. Call before noting it as received. */
  delivered(streamSeq: number, deliverySeq: number): void;
  /** Whether a pull request is out now (waits run down only while one is, over a connection that is up). */
  pulling(active: boolean): void;
  /** Whether the connection to the broker is up. */
  connected(up: boolean): void;
  /** Whether a held message must wait: an earlier message of its aggregate is awaited, or may be (a check is under way). */
  blocked(aggregate: string, seq: number): boolean;
  /** Looks again at the waits that ran out: asks the consumer whether each message can still come, and waits on or gives up. */
  expire(): void;
  /** How many messages are awaited (the run keeps pulling for them). */
  awaited(): number;
  /** Whether a check is under way. */
  checking(): boolean;
  /** How many milliseconds until the next wait runs out, if one runs down now. */
  nextDeadlineIn(): number | undefined;
};

/**
 * Guards a run against applying an event before an earlier one of its aggregate that the broker delivered but the
 * run never received: a delivery lost in flight (a node of the cluster, the connection or a pull request went away),
 * taken by another puller, or held by an earlier run that died. The broker delivers such a message again only after
 * its ack_wait, while it delivers newer messages at once.
 *
 * A check runs when a pull session begins with messages unacknowledged at the broker, and when a delivery's
 * consumer sequence does not follow the previous one (a delivery in between never arrived). Until it ends, nothing
 * above the highest stream sequence the run had received (or below the lowest one awaited: the lost delivery may
 * be its redelivery) is written. It reads the stream's messages on the consumer's subjects from there (from the
 * consumer's ack floor at the start of a run) up to the highest sequence delivered, and awaits each one the run
 * neither holds nor finds in the subscriber's inbox or dead letters (under the id it would be recorded with), except
 * those the subscriber ignores: until it is delivered again, the later messages of its aggregate wait, other
 * aggregates flow. After `giveUpMs` of pulling (a pull request out over a connection that is up: only then can it
 * come back) since a check last found it missing, the run asks the consumer: a delivery made since that check that
 * never reached the run starts a new check (the redelivery may be lost too); messages unacknowledged at the broker
 * beyond those the run holds (another puller holds them, or an old one kept them alive) mean the awaited message
 * may still come, and the wait goes on (logged), up to MAX_WAIT_EXTENSIONS times; otherwise the broker will not
 * deliver it again (someone acknowledged it) and it is given up on (logged). A check the broker refuses (no
 * permission to create consumers on the stream, or its consumer limit reached) is given up on after `giveUpMs`; one the
 * broker cannot answer (an election, no meta leader, a timeout) holds on until the broker answers it, a warning logged
 * at each wait.
 */
export function createMissingDeliveries(deps: MissingDeliveriesDeps): MissingDeliveries {
  const awaited = createAwaitedMessages();
  /**
   * The check under way: it may find missing only messages above `from`; it holds them back until `deadline`
   * (pulling time), while `reading`, and while `retrying` after the broker could not answer (`extensions` counts the
   * waits that added); `seen` are deliveries since it began; `again` asks for one more pass (a delivery went missing
   * meanwhile).
   */
  let check: { from: number; deadline: number; seen: Set<number>; again: boolean; extensions: number; reading: boolean; retrying: boolean } | undefined;
  let lastDelivery: number | undefined;
  /** Deliveries this run received, and the consumer's delivery count with that total when a check last ended. */
  let received = 0;
  let baseline: { delivered: number; received: number } | undefined;
  let probed = false;
  /** Pulling time: milliseconds during which a pull request was out, the clock every wait runs down on. */
  let pulledMs = 0;
  let pullingSince: number | undefined;
  let fetching = false;
  let up = true;
  /** Starts or stops the clock as a pull request is out over a connection that is up, or not. */
  const runClock = () => {
    const on = fetching && up;
    if (on && pullingSince === undefined) {
      pullingSince = performance.now();
      if (check || awaited.size() > 0) deps.changed(); // a wait runs down again: the write loop times it anew
    } else if (!on && pullingSince !== undefined) {
      pulledMs += performance.now() - pullingSince;
      pullingSince = undefined;
    }
  };
  const clock = () => pulledMs + (pullingSince === undefined ? 0 : performance.now() - pullingSince);

  /** Stops waiting for `gone` (logged with `why`): the later messages of their aggregates go on. */
  const giveUp = (gone: Array<{ seq: number }>, why: string) => {
    if (gone.length === 0) return;
    awaited.forget(gone.map((g) => g.seq));
    deps.log.warn(`consumer: stopped waiting for messages ${why}; the later events of their aggregates go on`, {
      consumer: deps.consumer,
      messages: gone.length,
      firstSequence: Math.min(...gone.map((g) => g.seq)),
    });
  };
  /** The waits that ran out go on for `ms` more of pulling time (a retry of the question, not an extension). */
  const askAgainIn = (ms: number) => {
    const due = awaited.due(clock());
    awaited.add(due, clock() + ms);
  };
  /** Whether the consumer is being asked if a wait that ran out may end. */
  let confirming = false;
  /**
   * When a wait ran out, asks the consumer first. No message unacknowledged at the broker beyond those only this run
   * can answer: nobody can still deliver the awaited one (someone acknowledged it), and it is given up on. A delivery
   * the consumer made since the last check that never reached this run, at every answer (the awaited message's
   * redelivery may have gone missing too): a check looks again. Otherwise it may be held by another puller, or kept alive by a run
   * that died (its last progress heartbeats can reach the broker late), and it waits on, MAX_WAIT_EXTENSIONS more
   * waits at most: the count cannot tell it from a message the run holds that another puller acknowledged through an
   * earlier delivery, and such a wait would otherwise last as long as the ack floor stays below it. Answers in flight
   * count as unacknowledged for a moment, so it asks up to CONFIRM_ASKS times before it waits on: an acknowledged
   * message never becomes unacknowledged again, so one answer with none elsewhere is enough.
   */
  const confirm = async () => {
    let elsewhere = 0;
    // a delivery never received at every answer was lost (one in flight arrives by the next)
    let lostEvery = true;
    for (let ask = 0; ask < CONFIRM_ASKS; ask++) {
      if (ask > 0) await pause(CONFIRM_SPACING_MS);
      if (deps.signal.aborted || check) return; // a check under way looks at the awaited messages again itself
      const before = deps.heldFirstHand();
      let info: ConsumerInfo;
      try {
        info = await deps.consumerInfo();
      } catch {
        askAgainIn(Math.min(deps.giveUpMs, 1000)); // the broker could not say: ask again soon rather than risk the order
        return;
      }
      awaited.forgetUpTo(info.ack_floor.stream_seq);
      if (awaited.due(clock()).length === 0) return;
      // deliveries the consumer made since the last check that never reached this run: one may be the redelivery
      const unreceived = baseline ? info.delivered.consumer_seq - baseline.delivered - (received - baseline.received) : 1;
      if (unreceived === 0) lostEvery = false;
      // held both before the question and after the answer: delivered before it and not answered yet (a message is
      // answered only as it is released), so the broker counted it as unacknowledged
      const after = deps.heldFirstHand();
      let ours = 0;
      for (const seq of before) if (after.has(seq)) ours++;
      elsewhere = info.num_ack_pending - ours;
      // the awaited message is not unacknowledged, not even on its way to this run: someone acknowledged it
      if (elsewhere <= 0) return giveUp(awaited.due(clock()), 'the broker will not deliver again (acknowledged by someone)');
    }
    if (lostEvery) return start();
    const due = awaited.due(clock());
    const more = due.filter((d) => d.extensions < MAX_WAIT_EXTENSIONS);
    giveUp(
      due.filter((d) => d.extensions >= MAX_WAIT_EXTENSIONS),
      `the broker did not deliver again within ${MAX_WAIT_EXTENSIONS + 1} waits, although it holds messages unacknowledged outside this run`,
    );
    awaited.extend(
      more.map((d) => d.seq),
      clock() + deps.giveUpMs,
    );
    if (more.length > 0)
      deps.log.warn(
        'consumer: still waiting for messages delivered but never received: the broker holds messages unacknowledged outside this run and may deliver them again; the later events of their aggregates wait',
        { consumer: deps.consumer, messages: more.length, firstSequence: Math.min(...more.map((d) => d.seq)), unacknowledgedElsewhere: elsewhere },
      );
  };
  const expire = () => {
    const next = awaited.nextDeadline();
    if (next === undefined || next > clock() || confirming || check) return;
    confirming = true;
    void confirm().finally(() => {
      confirming = false;
      deps.changed();
    });
  };
  /** Whether the check under way holds writes back: until its deadline, while it reads, and while it retries. */
  const holding = () => check !== undefined && (clock() < check.deadline || check.reading || check.retrying);

  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        deps.signal.removeEventListener('abort', done);
        resolve();
      }
      deps.signal.addEventListener('abort', done, { once: true });
    });

  /** One pass: the unacknowledged messages above `from` the run lacks. Undefined when `limit` stopped the read. */
  const lacking = async (
    c: NonNullable<typeof check>,
  ): Promise<{ missing: Array<{ seq: number; aggregate: string }>; floor: number; after: number; upTo: number } | undefined> => {
    const at = received;
    const info = await deps.consumerInfo();
    baseline = { delivered: info.delivered.consumer_seq, received: at };
    const floor = info.ack_floor.stream_seq;
    if (info.num_ack_pending === 0) return { missing: [], floor, after: floor, upTo: Number.POSITIVE_INFINITY };
    const after = Math.max(floor, c.from);
    const upTo = Math.max(info.delivered.stream_seq, deps.highestReceived());
    const missing: Array<{ seq: number; aggregate: string }> = [];
    const complete = await deps.readRange(after, upTo, async (entries) => {
      const held = deps.heldSeqs();
      const candidates: Array<{ seq: number; aggregate: string; id: string }> = [];
      for (const e of entries) {
        if (held.has(e.seq) || c.seen.has(e.seq)) continue;
        const id = deps.recordedAs(e.msg);
        if (id !== undefined) candidates.push({ seq: e.seq, aggregate: aggregateOf(e.msg), id });
      }
      if (candidates.length === 0) return;
      const known = await deps.applied([...new Set(candidates.map((e) => e.id))]);
      for (const e of candidates) if (!known.has(e.id) && !c.seen.has(e.seq)) missing.push({ seq: e.seq, aggregate: e.aggregate });
    });
    return complete ? { missing, floor, after, upTo } : undefined;
  };

  const run = async (c: NonNullable<typeof check>) => {
    let failures = 0;
    while (!deps.signal.aborted) {
      try {
        c.reading = true;
        const found = await lacking(c).finally(() => {
          c.reading = false;
        });
        c.retrying = false;
        if (found === undefined) {
          deps.log.warn(
            'consumer: too many messages to check one by one since the oldest unacknowledged one; writing nothing newer until they are delivered again',
            {
              consumer: deps.consumer,
              from: c.from,
            },
          );
          while (!deps.signal.aborted && holding()) await pause(Math.min(1000, Math.max(1, c.deadline - clock())));
          break;
        }
        if (c.again) {
          c.again = false;
          continue;
        }
        awaited.forgetUpTo(found.floor);
        // one awaited before and not missing now was applied (by an instance before this one) or left the stream
        const still = new Set(found.missing.map((m) => m.seq));
        for (const seq of awaited.seqs()) if (seq > found.after && seq <= found.upTo && !still.has(seq)) awaited.see(seq);
        awaited.add(found.missing, clock() + deps.giveUpMs);
        for (const s of c.seen) awaited.see(s);
        if (found.missing.length > 0)
          deps.log.info('consumer: waiting for messages delivered but never received before applying later events of their aggregates', {
            consumer: deps.consumer,
            messages: found.missing.length,
            aggregates: new Set(found.missing.map((m) => m.aggregate)).size,
          });
        break;
      } catch (error) {
        const refused = isPermissionViolation(error) || isConsumerLimit(error);
        if (failures++ === 0)
          deps.log.warn(
            refused
              ? 'consumer: may not check for deliveries that never arrived (it needs to create consumers on the stream); writing nothing newer until the wait runs out'
              : 'consumer: could not check for deliveries that never arrived (no answer from the broker or the database); writing nothing newer until it can',
            { consumer: deps.consumer, error: describeError(error) },
          );
        // A broker that cannot answer for now (an election, a lost meta leader) may have lost a delivery in the same
        // event: the check holds on until it can answer, however many waits that takes (each logged), since a later
        // event of an aggregate written before the missing one could never be taken back. A refusal will not change
        // by itself (no permission, the stream's consumer limit reached): it holds until the deadline.
        c.retrying = !refused;
        if (clock() >= c.deadline) {
          if (!c.retrying) break;
          c.extensions++;
          c.deadline = clock() + deps.giveUpMs;
          deps.log.warn('consumer: still cannot check for deliveries that never arrived; writing nothing newer for one more wait', {
            consumer: deps.consumer,
            wait: c.extensions + 1,
            error: describeError(error),
          });
        }
        await pause(Math.min(1000, Math.max(1, c.deadline - clock())));
      }
    }
    check = undefined;
    deps.changed();
  };

  const start = () => {
    // a delivery lost now may be the redelivery of one already awaited: look at those again, and wait on for them
    const from = Math.min(deps.highestReceived(), (awaited.lowest() ?? Number.POSITIVE_INFINITY) - 1);
    if (check) {
      // the delivery lost now gets a wait of its own, whatever is left of the check's
      check.from = Math.min(check.from, from);
      check.again = true;
      check.deadline = Math.max(check.deadline, clock() + deps.giveUpMs);
      return;
    }
    const c = { from, deadline: clock() + deps.giveUpMs, seen: new Set<number>(), again: false, extensions: 0, reading: false, retrying: false };
    check = c;
    void run(c);
  };

  return {
    session(info, restarted) {
      if (!probed) {
        probed = true;
        deps
          .probe()
          .catch((error: unknown) =>
            deps.log.error(
              'consumer: cannot create consumers on its stream, which it needs to check for deliveries that never arrived: after a crash or a lost delivery it writes nothing newer for up to 1.5 × ack_wait + 1 s; grant $JS.API.CONSUMER.CREATE.<stream>',
              { consumer: deps.consumer, error: describeError(error) },
            ),
          );
      }
      if (restarted) {
        awaited.clear();
        if (check) {
          check.from = 0;
          check.seen.clear();
          check.again = true;
        }
      }
      lastDelivery = info.delivered.consumer_seq;
      if (info.num_ack_pending > 0) start();
    },
    delivered(streamSeq, deliverySeq) {
      received++; // before a check starts: the consumer's count it reads includes this delivery
      if (lastDelivery !== undefined && deliverySeq !== lastDelivery + 1) start();
      lastDelivery = deliverySeq;
      check?.seen.add(streamSeq);
      awaited.see(streamSeq);
    },
    pulling(active) {
      fetching = active;
      runClock();
    },
    connected(isUp) {
      up = isUp;
      runClock();
    },
    blocked(aggregate, seq) {
      if (check !== undefined && seq > check.from && holding()) return true;
      return awaited.holdsBack(aggregate, seq);
    },
    expire,
    awaited: () => awaited.size(),
    checking: () => holding(),
    nextDeadlineIn() {
      if (pullingSince === undefined || confirming) return undefined;
      const at = check ? check.deadline : awaited.nextDeadline();
      if (at === undefined) return undefined;
      const left = at - clock();
      // a check past its deadline no longer holds anything back, and says when it ends (changed)
      return check && left <= 0 ? undefined : Math.max(1, left);
    },
  };
}
