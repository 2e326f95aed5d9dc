import { JetStreamApiError, JetStreamError } from '@nats-io/jetstream';
import { JetStreamStatusError, jserrors } from '@nats-io/jetstream/internal';
import { ClosedConnectionError, DrainingConnectionError, InvalidSubjectError, NoRespondersError, RequestError, TimeoutError } from '@nats-io/nats-core';
import { describe, expect, it } from 'vitest';
import { isBrokerUnavailable } from '../../src/outbox/publish-errors.ts';

// The errors below are built the way @nats-io/jetstream 3.4.0 builds them from what nats-server 2.9.10 answers. The
// first group is what publishes met on a three-node cluster while a stream leader or a node was SIGKILLed
// (test/int/cluster.int.spec.ts checks the same on real servers).

/** A JetStream API error as the client builds it from the server's `{"error": {code, err_code, description}}`. */
const apiError = (code: number, errCode: number, description: string) => new JetStreamApiError({ code, err_code: errCode, description });

/** What `js.publish` throws when nothing answers on the subject: the client reads a 503 "no responders" as JetStream not enabled. */
const noResponders = (subject: string) =>
  new jserrors.JetStreamNotEnabled('jetstream is not enabled', {
    cause: new RequestError(`no responders: '${subject}'`, { cause: new NoRespondersError(subject) }),
  });

describe('isBrokerUnavailable - errors seen during a JetStream leader election', () => {
  it('classifies a publish timeout (no PubAck while the stream elects a leader) as the broker being unavailable', () => {
    expect(isBrokerUnavailable(new TimeoutError())).toBe(true);
  });

  it("classifies no responders (a stream without a leader), which the client reports as 'jetstream is not enabled', as unavailable", () => {
    expect(isBrokerUnavailable(noResponders('events.account.a-1.3'))).toBe(true);
  });

  it("classifies JetStream 503 'JetStream system temporarily unavailable' (no meta leader, no quorum) as unavailable", () => {
    expect(isBrokerUnavailable(apiError(503, 10008, 'JetStream system temporarily unavailable'))).toBe(true);
  });

  it('classifies the other cluster-not-ready answers (not leader, not assigned, offline, incomplete) as unavailable', () => {
    expect(isBrokerUnavailable(apiError(500, 10009, 'JetStream cluster can not handle request'))).toBe(true);
    expect(isBrokerUnavailable(apiError(500, 10007, 'JetStream cluster not assigned to this server'))).toBe(true);
    expect(isBrokerUnavailable(apiError(500, 10118, 'stream is offline'))).toBe(true);
    expect(isBrokerUnavailable(apiError(503, 10004, 'incomplete results'))).toBe(true);
  });

  it('classifies any JetStream API error with status 503 as unavailable, whatever its code', () => {
    expect(isBrokerUnavailable(apiError(503, 19999, 'some future outage'))).toBe(true);
  });

  it('classifies a 503 status of a pull request as unavailable', () => {
    expect(isBrokerUnavailable(new JetStreamStatusError('no responders', 503))).toBe(true);
  });
});

describe('isBrokerUnavailable - connection and capacity troubles', () => {
  it('classifies a lost, closed or draining connection as unavailable', () => {
    expect(isBrokerUnavailable(new RequestError('connection disconnected'))).toBe(true);
    expect(isBrokerUnavailable(new ClosedConnectionError())).toBe(true);
    expect(isBrokerUnavailable(new DrainingConnectionError())).toBe(true);
  });

  it('classifies a full stream (discard new) and exhausted resources as unavailable', () => {
    expect(isBrokerUnavailable(apiError(503, 10077, 'maximum bytes exceeded'))).toBe(true);
    expect(isBrokerUnavailable(apiError(503, 10023, 'insufficient resources'))).toBe(true);
    expect(isBrokerUnavailable(apiError(500, 10047, 'insufficient storage resources available'))).toBe(true);
  });

  it('classifies something thrown that is not an Error as unavailable', () => {
    expect(isBrokerUnavailable('socket hang up')).toBe(true);
    expect(isBrokerUnavailable(undefined)).toBe(true);
  });
});

describe('isBrokerUnavailable - permanent errors of the message', () => {
  it('classifies a message larger than the stream allows as permanent', () => {
    expect(isBrokerUnavailable(apiError(400, 10054, 'message size exceeds maximum allowed'))).toBe(false);
  });

  it('classifies other rejections of the message by the stream as permanent', () => {
    expect(isBrokerUnavailable(apiError(400, 10060, 'expected stream does not match'))).toBe(false);
    expect(isBrokerUnavailable(apiError(400, 10071, 'wrong last sequence: 41'))).toBe(false);
    expect(isBrokerUnavailable(apiError(400, 10097, 'header size exceeds maximum allowed of 64k'))).toBe(false);
  });

  it('classifies an answer that is no PubAck, an illegal subject and an ordinary error as permanent', () => {
    expect(isBrokerUnavailable(new JetStreamError('invalid ack response'))).toBe(false);
    expect(isBrokerUnavailable(new InvalidSubjectError('events.account. .1'))).toBe(false);
    expect(isBrokerUnavailable(new Error('outbox row columns do not match its payload'))).toBe(false);
  });
});
