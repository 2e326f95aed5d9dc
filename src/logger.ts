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

// Errors keep their type, message and stack; a BigInt becomes its decimal text (JSON has no such number).
const replaceValues = (_key: string, value: unknown) => (value instanceof Error ? serializeError(value) : typeof value === 'bigint' ? value.toString() : value);

/** A value replaceValues leaves as it is, at any depth: neither an object (an Error may hide in one) nor a BigInt. */
const isPlain = (value: unknown): boolean => (typeof value !== 'object' || value === null) && typeof value !== 'bigint';

/**
 * The line as JSON. A field named like one every line carries (`reserved`: time, level, msg and the base fields) is
 * written as `field_<name>` instead of replacing it; fields that cannot be written (a cycle, a throwing toJSON) are
 * replaced by why, never thrown.
 */
function render(line: Record<string, unknown>, fields: LogFields | undefined, reserved: ReadonlySet<string>): string {
  const all: Record<string, unknown> = { ...line };
  // a line of plain values (an access line) needs no replacer, which JSON.stringify would call for every key
  let plain = true;
  for (const key in line) plain &&= isPlain(line[key]);
  for (const key in fields) {
    const value = fields[key];
    all[reserved.has(key) ? `field_${key}` : key] = value;
    plain &&= isPlain(value);
  }
  try {
    return plain ? JSON.stringify(all) : JSON.stringify(all, replaceValues);
  } catch (error) {
    return JSON.stringify({ ...line, log_error: `fields not serializable: ${error instanceof Error ? error.message : String(error)}` }, replaceValues);
  }
}

/**
 * One JSON object per line at or above `level`, written through `write` with its level (stdout by default; the service entries
 * batch a turn's lines, see src/entry/stdout-lines.ts): time,
 * level, `base` (e.g. `{ service, version }`), msg, the active span's `trace_id`/`span_id` (read through `context`),
 * then the line's own fields; one named like time, level, msg or a base field is written as `field_<name>`. Errors
 * in the fields are written with their type, message and stack, BigInts as text; fields that cannot be serialized
 * (a cycle) are replaced by `log_error`: logging never throws for its fields.
 */
export function createLogger(
  level: LogLevel = 'info',
  write: (line: string, level: Exclude<LogLevel, 'silent'>) => void = (l) => console.log(l),
  base: LogFields = {},
  context: () => LogFields | undefined = activeTraceFields,
): Logger {
  const reserved = new Set(['time', 'level', 'msg', ...Object.keys(base)]);
  const at = (lvl: Exclude<LogLevel, 'silent'>) => (msg: string, fields?: LogFields) => {
    if (ORDER[lvl] < ORDER[level]) return;
    write(render({ time: new Date().toISOString(), level: lvl, ...base, msg, ...context() }, fields, reserved), lvl);
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
