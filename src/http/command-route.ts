import { serverSpanOf } from './server-span.ts';
import { type LogFields, type Logger, silentLogger } from '../logger.ts';
import type { Span } from '@opentelemetry/api';
import { traceFields } from '../telemetry/trace-context.ts';
import type { Context, MiddlewareHandler } from 'hono';
import type { z } from 'zod';
import type { Tx } from '../db/open-database.ts';
import type { Deps } from '../deps.ts';
import type { AppError } from '../errors.ts';
import type { IntegrationEvent } from '../events/integration-event.ts';
import { appendToOutbox, type OutboxHeaders } from '../outbox/append-to-outbox.ts';
import { describeCommand, summaryOf } from './describe-route.ts';
import { readIdempotencyKey, runIdempotent, sendCommandResponse, type CommandProblem, type CommandResponse } from './idempotency.ts';
import { requireJson, validJson } from './json-body.ts';
import { outboxHeadersFrom } from './trace-headers.ts';

/** What a command handler gets besides its transaction and its validated input. */
export type Command = {
  /** The command's time: one instant for its state, its events and its idempotency key. */
  now: Date;
  newId: () => string;
  /** The route's path parameters (`/:id` → `params.id`). */
  params: Record<string, string>;
  /** Appends integration events to the outbox in this transaction (registry-checked, with the request's trace headers). */
  emit(events: IntegrationEvent[]): Promise<void>;
  /** True once `emit` stored an event. */
  emitted: boolean;
  /** The service's logger, every line carrying the trace_id/span_id of the request's SERVER span. */
  log: Logger;
};

/** What a command returns: a response, or an expected refusal (404, 409 …) as a value, never thrown. */
export type CommandOutcome = CommandResponse | CommandProblem;

/** A command handler: state and events in the caller's write transaction; database work only (it may run twice). */
export type CommandHandler<I> = (tx: Tx, input: I, cmd: Command) => Promise<CommandOutcome>;

/** `201 Created` with a Location. */
export const created = (location: string, body: unknown): CommandResponse => ({ status: 201, location, body });
/** `200 OK`. */
export const ok = (body: unknown): CommandResponse => ({ status: 200, body });
/**
 * An expected refusal, answered as problem+json after the write (other commands of the group still commit).
 * Decide it before writing: a refusal returned after `emit` rolls the command's writes back, at the price of
 * re-running its whole commit group one command at a time.
 */
export const refuse = (problem: AppError): CommandProblem => ({ problem });

/**
 * `log` with the trace_id/span_id of `span` added to every line (a line's own fields win), like withFields: a
 * class, so a request pays for one small object and reads the span's ids only if its command logs something.
 */
class SpanLogger implements Logger {
  constructor(
    private readonly log: Logger,
    private readonly span: Span,
  ) {}
  private with(fields: LogFields | undefined): LogFields {
    return { ...traceFields(this.span.spanContext()), ...fields };
  }
  debug(msg: string, fields?: LogFields): void {
    this.log.debug(msg, this.with(fields));
  }
  info(msg: string, fields?: LogFields): void {
    this.log.info(msg, this.with(fields));
  }
  warn(msg: string, fields?: LogFields): void {
    this.log.warn(msg, this.with(fields));
  }
  error(msg: string, fields?: LogFields): void {
    this.log.error(msg, this.with(fields));
  }
}

/** A handler emitted events and then refused: thrown inside the writer so its writes roll back, answered as the refusal. */
class RefusedAfterWrite extends Error {
  constructor(readonly problem: AppError) {
    super(`command refused after emitting events: ${problem.message}`);
  }
}

/** The Command of one execution in `tx`: the clock read once, ids, path parameters, an `emit` bound to `tx` and a logger. */
export function createCommand(
  tx: Tx,
  deps: Pick<Deps, 'registry' | 'clock' | 'newId'> & Partial<Pick<Deps, 'log'>>,
  extra: { params?: Record<string, string>; headers?: OutboxHeaders; log?: Logger } = {},
): Command {
  const now = deps.clock();
  return {
    now,
    newId: deps.newId,
    params: extra.params ?? {},
    emitted: false,
    log: extra.log ?? deps.log ?? silentLogger,
    emit(events) {
      this.emitted ||= events.length > 0;
      return appendToOutbox(tx, events, { registry: deps.registry, now, ...(extra.headers ? { headers: extra.headers } : {}) });
    },
  };
}

/**
 * The handlers of a command route, to spread after its path: `app.post('/:id/cancel', ...commandRoute(deps, Body, cancel))`.
 * Requires a JSON body (415 otherwise; `emptyBody` lets a missing or empty body through as `{}`), validates it
 * (400 problem with the zod issues), honours Idempotency-Key, stores the request's server-span trace context and
 * its correlation id with the outbox rows (outboxHeadersFrom), runs `handler` inside the writer (so it shares a group commit), answers after the commit, and wakes
 * the relay when something new was committed. It also describes the route for /openapi.json (describeCommand;
 * the summary defaults to the handler's name in words).
 */
export function commandRoute<S extends z.ZodType>(
  deps: Deps,
  body: S,
  handler: CommandHandler<z.output<S>>,
  options: { emptyBody?: boolean; summary?: string } = {},
) {
  // typed with the body's input so the route's schema, and so a hono/client, knows the body (`hc<ApiOf<…>>`)
  const run: MiddlewareHandler<any, string, { in: { json: z.input<S> }; out: { json: z.output<S> } }> = async function runCommand(c: Context) {
    const input = (c.req.valid as (target: 'json') => z.output<S>)('json');
    const key = await readIdempotencyKey(c, input);
    const headers = outboxHeadersFrom(c);
    const params = c.req.param() as Record<string, string>;
    const span = serverSpanOf(c);
    const log = span ? new SpanLogger(deps.log, span) : deps.log;
    let res: Awaited<ReturnType<typeof runIdempotent>>;
    try {
      res = await deps.writer.write((tx) => {
        const cmd = createCommand(tx, deps, { params, headers, log });
        return runIdempotent(tx, key, cmd.now, async () => {
          const outcome = await handler(tx, input, cmd);
          if ('problem' in outcome && cmd.emitted) throw new RefusedAfterWrite(outcome.problem);
          return outcome;
        });
      });
    } catch (error) {
      if (!(error instanceof RefusedAfterWrite)) throw error;
      deps.log.warn('command refused after emitting events; its writes were rolled back (refuse before writing)', {
        path: c.req.path,
        detail: error.problem.message,
      });
      throw error.problem;
    }
    if (!('problem' in res) && !res.replayed) deps.outboxCommitted.notify();
    return sendCommandResponse(c, res);
  };
  const describe = describeCommand(body, { summary: options.summary ?? summaryOf(handler.name), emptyBody: options.emptyBody ?? false });
  return [describe, requireJson({ allowEmpty: options.emptyBody ?? false }), validJson(body), run] as const;
}
