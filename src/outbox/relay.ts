import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import type { Logger } from '../logger.ts';
import type { ConnectNats } from '../nats/connect.ts';
import { ensureStream, UnsafeStreamConfigError } from '../nats/ensure-stream.ts';
import { kickSubject, type StreamSettings } from '../nats/stream-settings.ts';
import type { Signal } from '../signal.ts';
import { backoffDelay } from './backoff.ts';
import { isBusyError } from '../db/busy.ts';
import { relayPass, type RelayPassDeps } from './relay-pass.ts';

export type RelayDeps = RelayPassDeps & {
  log: Logger;
  connect: ConnectNats;
  stream: StreamSettings;
  /** Notified by in-process commits and by kicks from other processes. */
  wake: Signal;
  pollMs: number;
};

export type RelayRunOptions = {
  /** Stops after the pass in flight when aborted (SIGTERM/SIGINT). */
  signal?: AbortSignal;
  timeLimitMs?: number;
  /** Stops once at least this many rows were acknowledged. */
  maxMessages?: number;
  /** Stops after the first pass that finds nothing to do (bounded runs, e.g. a cron tick). */
  untilIdle?: boolean;
};

export type RelayRunSummary = { passes: number; published: number; duplicates: number; failed: number; parked: number; brokerErrors: number };

export type BrokerState = 'connecting' | 'connected' | 'unavailable';

/** A relay worker; `run` loops until stopped and resolves with what it did. */
export type Relay = { run(options?: RelayRunOptions): Promise<RelayRunSummary>; state(): BrokerState };

/**
 * Creates the relay loop: connect (retrying with back-off), ensure the stream, then pass after pass. It sleeps
 * until woken or for pollMs when idle, and backs off the whole worker 1 s, 2 s, 4 s … max (jittered) while the
 * broker is unavailable. An unsafe stream configuration is fatal: `run` rejects with UnsafeStreamConfigError.
 */
export function createRelay(deps: RelayDeps): Relay {
  let brokerState: BrokerState = 'connecting';

  return {
    state: () => brokerState,
    async run(options = {}) {
      const summary: RelayRunSummary = { passes: 0, published: 0, duplicates: 0, failed: 0, parked: 0, brokerErrors: 0 };
      const stop = new AbortController();
      const timers: Array<ReturnType<typeof setTimeout>> = [];
      const onAbort = () => stop.abort();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      if (options.signal?.aborted) stop.abort();
      if (options.timeLimitMs !== undefined) timers.push(setTimeout(onAbort, options.timeLimitMs));

      let nc: NatsConnection | undefined;
      let kicks: Subscription | undefined;
      let outage = 0;
      let marking: Promise<void> | undefined;
      let cursor = 0;
      const sleep = (ms: number) =>
        new Promise<void>((resolve) => {
          const t = setTimeout(done, ms);
          function done() {
            clearTimeout(t);
            stop.signal.removeEventListener('abort', done);
            resolve();
          }
          stop.signal.addEventListener('abort', done, { once: true });
        });
      const setState = (next: BrokerState, error?: unknown) => {
        if (next === brokerState) return;
        brokerState = next;
        if (next === 'unavailable') deps.log.warn('relay: broker unavailable, backing off', { error: String(error) });
        else if (next === 'connected') deps.log.info('relay: broker available, publishing');
      };

      try {
        while (!stop.signal.aborted) {
          try {
            if (!nc || nc.isClosed()) {
              nc = await deps.connect();
              await ensureStream(await jetstreamManager(nc), deps.stream);
              kicks = nc.subscribe(kickSubject(deps.stream.name), { callback: () => deps.wake.notify() });
            }
          } catch (error) {
            if (error instanceof UnsafeStreamConfigError) throw error;
            await nc?.close().catch(() => undefined);
            nc = undefined;
            outage++;
            summary.brokerErrors++;
            deps.metrics.publishErrors.inc();
            setState('unavailable', error);
            await sleep(backoffDelay(outage, { baseMs: deps.settings.backoffBaseMs, maxMs: deps.settings.maxBackoffMs, random: deps.random }));
            continue;
          }

          // Draining a backlog (full batches), the next pass fetches and publishes the rows after a pass while
          // that pass's mark-sent write runs (at most one mark outstanding). A partial pass, or one with failures,
          // is marked before anything else is read: rows held back behind a failure are never fetched early, and
          // the cursor resets as soon as the backlog is gone, so waiting retries come due again.
          let pass: Awaited<ReturnType<typeof relayPass>>;
          try {
            pass = await relayPass(deps, jetstream(nc, { timeout: deps.settings.publishTimeoutMs }), {
              afterSeq: marking ? cursor : 0,
              deferMark: true,
            });
            const previous = marking;
            marking = undefined;
            await previous;
            if (pass.failed > 0 || pass.brokerError !== undefined || pass.fetched < deps.settings.batch) await pass.marked;
            else {
              marking = pass.marked;
              cursor = pass.lastSeq;
              marking.catch(() => undefined); // awaited at the next pass; handled meanwhile
            }
          } catch (error) {
            // Another process held the database past the busy timeout: what was acknowledged but not marked is
            // published again later and acknowledged as a duplicate. Anything else is a bug: let it surface.
            if (!isBusyError(error)) throw error;
            marking = undefined;
            deps.log.warn('relay: database busy, backing off', { error: String(error) });
            await sleep(backoffDelay(1, { baseMs: deps.settings.backoffBaseMs, maxMs: deps.settings.maxBackoffMs, random: deps.random }));
            continue;
          }
          summary.passes++;
          summary.published += pass.published;
          summary.duplicates += pass.duplicates;
          summary.failed += pass.failed;
          summary.parked += pass.parked;

          if (pass.brokerError !== undefined) {
            outage++;
            summary.brokerErrors++;
            setState('unavailable', pass.brokerError);
            await sleep(backoffDelay(outage, { baseMs: deps.settings.backoffBaseMs, maxMs: deps.settings.maxBackoffMs, random: deps.random }));
            continue;
          }
          outage = 0;
          setState('connected');
          if (options.maxMessages !== undefined && summary.published + summary.duplicates >= options.maxMessages) break;
          if (pass.fetched < deps.settings.batch) {
            if (options.untilIdle) break;
            await deps.wake.wait(deps.pollMs, stop.signal);
          }
        }
      } finally {
        await marking?.catch((error: unknown) => deps.log.warn('relay: marking the last pass failed', { error: String(error) }));
        timers.forEach(clearTimeout);
        options.signal?.removeEventListener('abort', onAbort);
        kicks?.unsubscribe();
        await nc?.close().catch(() => undefined);
      }
      return summary;
    },
  };
}
