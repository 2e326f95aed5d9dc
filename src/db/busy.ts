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
