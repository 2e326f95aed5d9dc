import { activeTraceFields } from './telemetry/trace-context.ts';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
export type LogFields = Record<string, unknown>;
export type Logger = {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
};

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 99 };

/** An error as a log field: its type, message, stack and (one level of) cause. */
export function serializeError(error: Error): Record<string, unknown> {
  const out: Record<string, unknown> = { type: error.name, message: error.message };
  if (error.stack) out.stack = error.stack;
  const cause = (error as { cause?: unknown }).cause;
  if (cause instanceof Error) out.cause = { type: cause.name, message: cause.message, ...(cause.stack ? { stack: cause.stack } : {}) };
  else if (cause !== undefined) out.cause = String(cause);
  return out;
}

const replaceErrors = (_key: string, value: unknown) => (value instanceof Error ? serializeError(value) : value);

/**
 * One JSON object per line at or above `level`, written through `write` with its level (stdout by default): time, level, `base`
 * (e.g. `{ service, version }`), msg, the active span's `trace_id`/`span_id` (read through `context`), then the
 * line's own fields. Error values anywhere in the fields are written with their type, message and stack.
 */
export function createLogger(
  level: LogLevel = 'info',
  write: (line: string, level: Exclude<LogLevel, 'silent'>) => void = (l) => console.log(l),
  base: LogFields = {},
  context: () => LogFields | undefined = activeTraceFields,
): Logger {
  const at = (lvl: Exclude<LogLevel, 'silent'>) => (msg: string, fields?: LogFields) => {
    if (ORDER[lvl] < ORDER[level]) return;
    write(JSON.stringify({ time: new Date().toISOString(), level: lvl, ...base, msg, ...context(), ...fields }, replaceErrors), lvl);
  };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/** `log` with `fields` added to every line (a line's own fields win), e.g. the trace ids of one message's span. */
export function withFields(log: Logger, fields: LogFields): Logger {
  return {
    debug: (msg, f) => log.debug(msg, { ...fields, ...f }),
    info: (msg, f) => log.info(msg, { ...fields, ...f }),
    warn: (msg, f) => log.warn(msg, { ...fields, ...f }),
    error: (msg, f) => log.error(msg, { ...fields, ...f }),
  };
}

/** A logger that drops everything; for tests. */
export const silentLogger: Logger = createLogger('silent');
