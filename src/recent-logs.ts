// The last warnings and errors a process logged, kept in memory for the status page (GET /status.json).
import type { Logger } from './logger.ts';

/** One recorded line: its level, message and fields, each field written as text of at most FIELD_MAX_CHARS. */
export type RecentLogEntry = { time: string; level: 'warn' | 'error'; msg: string; fields: Record<string, string> };

/** Reads the recorded lines, oldest first. */
export type RecentLogs = { list(): RecentLogEntry[] };

/** How many lines are kept unless told otherwise. */
export const RECENT_LOGS_CAPACITY = 20;

const FIELD_MAX_CHARS = 500;
// A stack says where in the code, not what happened; it stays in the process log only.
const DROPPED_FIELDS = new Set(['stack']);

/** `value` as JSON (BigInts as text), or why it has none (a cycle): recording a line never throws. */
function jsonOrWhy(value: unknown): string {
  try {
    return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)) ?? String(value);
  } catch (error) {
    return `[not serializable: ${error instanceof Error ? error.message : String(error)}]`;
  }
}

const asText = (value: unknown): string => {
  const text = typeof value === 'string' ? value : value instanceof Error ? `${value.name}: ${value.message}` : jsonOrWhy(value);
  return text.length > FIELD_MAX_CHARS ? `${text.slice(0, FIELD_MAX_CHARS)}…` : text;
};

/**
 * Wraps `log`: every line still goes to it, and its warn and error lines (whatever level `log` writes at) are also
 * kept, the last `capacity` of them, in `recent`. Memory stays bounded: at most `capacity` lines of bounded fields.
 */
export function recordRecentLogs(log: Logger, options: { capacity?: number; clock?: () => Date } = {}): { log: Logger; recent: RecentLogs } {
  const capacity = options.capacity ?? RECENT_LOGS_CAPACITY;
  const clock = options.clock ?? (() => new Date());
  const ring: RecentLogEntry[] = [];
  const keep = (level: RecentLogEntry['level'], msg: string, fields: Record<string, unknown> = {}) => {
    const kept: Record<string, string> = {};
    for (const [k, v] of Object.entries(fields)) if (!DROPPED_FIELDS.has(k) && v !== undefined) kept[k] = asText(v);
    ring.push({ time: clock().toISOString(), level, msg: asText(msg), fields: kept });
    if (ring.length > capacity) ring.shift();
  };
  return {
    log: {
      debug: (msg, fields) => log.debug(msg, fields),
      info: (msg, fields) => log.info(msg, fields),
      warn(msg, fields) {
        keep('warn', msg, fields);
        log.warn(msg, fields);
      },
      error(msg, fields) {
        keep('error', msg, fields);
        log.error(msg, fields);
      },
    },
    recent: { list: () => [...ring] },
  };
}
