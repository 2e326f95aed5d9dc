/** The database stayed locked by another writer for longer than the busy timeout; retrying later can succeed. */
export class DatabaseBusyError extends Error {
  override readonly name = 'DatabaseBusyError';
  constructor(cause: unknown) {
    super('The database is busy; retry shortly', { cause });
  }
}

/** True for SQLITE_BUSY / SQLITE_LOCKED in any of the forms @libsql/client reports them. */
export function isBusyError(error: unknown): boolean {
  if (error instanceof DatabaseBusyError) return true;
  if (typeof error !== 'object' || error === null) return false;
  const e = error as { code?: unknown; extendedCode?: unknown; message?: unknown; cause?: unknown };
  const codes = [e.code, e.extendedCode].map(String);
  if (codes.some((c) => c.startsWith('SQLITE_BUSY') || c.startsWith('SQLITE_LOCKED'))) return true;
  if (typeof e.message === 'string' && /database is locked|SQLITE_BUSY/i.test(e.message)) return true;
  return e.cause !== undefined && e.cause !== error && isBusyError(e.cause);
}

/**
 * True when a database call failed because the server could not be reached (fetch failed, connection refused or
 * reset, or a 5xx from a proxy in front of it): a retry later may work, so the request answers 503, not 500.
 */
export function isDatabaseUnreachable(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const e = error as { name?: unknown; code?: unknown; message?: unknown; cause?: unknown };
  if (e.name === 'TypeError' && typeof e.message === 'string' && /fetch|network|connect/i.test(e.message)) return true;
  if (e.code === 'SERVER_ERROR' && typeof e.message === 'string' && /status 5\d\d/.test(e.message)) return true;
  if (typeof e.message === 'string' && /network connection lost|connection refused|ECONNREFUSED|ECONNRESET/i.test(e.message)) return true;
  return e.cause !== undefined && e.cause !== error && isDatabaseUnreachable(e.cause);
}
