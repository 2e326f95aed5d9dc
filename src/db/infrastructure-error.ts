import { isBusyError, isDatabaseUnreachable } from './busy.ts';

/** SQLite result codes that describe the database or its storage, not the statement or the data. */
const INFRASTRUCTURE_CODES = /^SQLITE_(BUSY|LOCKED|IOERR|FULL|CANTOPEN|READONLY|PROTOCOL|NOMEM|NOTADB|CORRUPT)/;

/**
 * True when a database call failed because the database could not be used right now (locked past the busy
 * timeout, an I/O error, a full disk, a closed or unreachable connection), as opposed to a statement or
 * constraint error: retrying the same work later can succeed, so loops back off instead of giving up or
 * spending a message's delivery budget. Looks through wrapped causes (drizzle wraps driver errors).
 */
export function isInfrastructureError(error: unknown): boolean {
  if (isBusyError(error) || isDatabaseUnreachable(error)) return true;
  return hasInfrastructureCode(error, 0);
}

function hasInfrastructureCode(error: unknown, depth: number): boolean {
  if (typeof error !== 'object' || error === null || depth > 8) return false;
  const e = error as { code?: unknown; extendedCode?: unknown; message?: unknown; cause?: unknown };
  if ([e.code, e.extendedCode].some((c) => typeof c === 'string' && INFRASTRUCTURE_CODES.test(c))) return true;
  // a closed client, a remote server's stream or connection gone (sqld/Turso over Hrana)
  if (typeof e.code === 'string' && /^(CLIENT_CLOSED|HRANA_|STREAM_EXPIRED|SERVER_ERROR)/.test(e.code)) return true;
  if (
    typeof e.message === 'string' &&
    /statements in progress|ConnectionFailed|disk is full|disk I\/O error|database or disk is full|unable to open database/i.test(e.message)
  ) {
    return true;
  }
  return e.cause !== undefined && e.cause !== error && hasInfrastructureCode(e.cause, depth + 1);
}
