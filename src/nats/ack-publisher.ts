import { JetStreamApiError, JetStreamError, type PubAck } from '@nats-io/jetstream';
import { createInbox, errors, type Msg, type MsgHdrs, type NatsConnection } from '@nats-io/nats-core';

/** Called once per message: with its PubAck, or with why it was not acknowledged, and the context it was published with. */
export type AckCallback<C = undefined> = (error: unknown, ack: PubAck | undefined, context: C) => void;

/**
 * JetStream publishing for a pipelined publisher: each message is a core publish with its own reply subject under
 * one inbox subscription, and its PubAck (or error) comes back through a callback.
 */
export type AckPublisher = {
  /**
   * Publishes `data` to `subject` with `headers` (which carry Nats-Msg-Id when the broker should deduplicate) and
   * calls `done` exactly once, with `context`: with the PubAck, with a JetStreamApiError the stream answered, with
   * NoRespondersError when nothing serves the subject, with TimeoutError after `timeoutMs`, or with the connection's
   * error. Never throws. One `done` for many messages, told apart by their context, costs no closure per message.
   */
  publish<C = undefined>(subject: string, data: Uint8Array, headers: MsgHdrs, done: AckCallback<C>, context?: C): void;
  /** How many messages await their PubAck. */
  pending(): number;
  /** Stops listening; messages still awaiting a PubAck get ClosedConnectionError. */
  close(): void;
};

type Waiting = { done: AckCallback<unknown>; context: unknown; subject: string; deadline: number };

const decoder = new TextDecoder();

/** What the stream answered, as `js.publish` would resolve or reject. */
function outcomeOf(msg: Msg, subject: string): { error: unknown; ack?: PubAck } {
  if (msg.data.length === 0 && msg.headers?.code === 503) return { error: new errors.NoRespondersError(subject) };
  let body: { error?: unknown; stream?: string; seq?: number; duplicate?: boolean; domain?: string };
  try {
    body = JSON.parse(decoder.decode(msg.data)) as typeof body;
  } catch (error) {
    return { error: new JetStreamError('invalid ack response', { cause: error }) };
  }
  if (body.error) return { error: new JetStreamApiError(body.error as ConstructorParameters<typeof JetStreamApiError>[0]) };
  if (typeof body.stream !== 'string' || body.stream === '' || typeof body.seq !== 'number') return { error: new JetStreamError('invalid ack response') };
  return { error: undefined, ack: { stream: body.stream, seq: body.seq, duplicate: body.duplicate === true, domain: body.domain ?? '' } as PubAck };
}

/**
 * Creates an AckPublisher on `nc`. Unlike `jetstream(nc).publish`, a message costs no promise, no timer and no
 * request object of its own: replies are matched by a counter in the reply subject, and one sweep (every quarter of
 * `timeoutMs`, only while messages wait) times out those past their deadline, oldest first. The outcomes are the same
 * as `js.publish`'s, so the relay's error classification applies unchanged.
 */
export function createAckPublisher(nc: NatsConnection, timeoutMs: number): AckPublisher {
  // the connection's own inbox prefix, where an account's permissions allow replies
  const prefix = `${createInbox((nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix)}.`;
  const waiting = new Map<number, Waiting>();
  let next = 0;
  let sweep: ReturnType<typeof setInterval> | undefined;
  let closed = false;

  const settle = (token: number, error: unknown, ack?: PubAck) => {
    const w = waiting.get(token);
    if (!w) return;
    waiting.delete(token);
    if (waiting.size === 0 && sweep !== undefined) {
      clearInterval(sweep);
      sweep = undefined;
    }
    w.done(error, ack, w.context);
  };
  const failAll = (error: () => unknown) => {
    for (const token of [...waiting.keys()]) settle(token, error());
  };

  const sub = nc.subscribe(`${prefix}*`, {
    callback: (error, msg) => {
      if (error) return failAll(() => error);
      const token = Number(msg.subject.slice(prefix.length));
      const w = waiting.get(token);
      if (!w) return;
      const { error: failure, ack } = outcomeOf(msg, w.subject);
      settle(token, failure, ack);
    },
  });
  void nc.closed().then(() => {
    closed = true;
    failAll(() => new errors.RequestError('connection closed'));
  });

  const expire = () => {
    // a monotonic clock: a wall clock stepped back (NTP, an operator) must not hold a timeout back
    const now = performance.now();
    // insertion order is publish order, and every message has the same timeout: the expired ones are at the head
    for (const [token, w] of waiting) {
      if (w.deadline > now) break;
      settle(token, new errors.TimeoutError());
    }
  };

  return {
    publish<C>(subject: string, data: Uint8Array, headers: MsgHdrs, done: AckCallback<C>, context?: C) {
      if (closed) return done(new errors.ClosedConnectionError(), undefined, context as C);
      const token = ++next;
      waiting.set(token, { done: done as AckCallback<unknown>, context, subject, deadline: performance.now() + timeoutMs });
      sweep ??= setInterval(expire, Math.max(10, Math.floor(timeoutMs / 4)));
      try {
        nc.publish(subject, data, { reply: `${prefix}${token}`, headers });
      } catch (error) {
        settle(token, error);
      }
    },
    pending: () => waiting.size,
    close() {
      closed = true;
      sub.unsubscribe();
      failAll(() => new errors.ClosedConnectionError());
    },
  };
}
