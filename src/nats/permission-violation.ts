/** True for the broker's refusal of a subject this connection's user may not use (the error or one of its causes). */
export function isPermissionViolation(error: unknown): boolean {
  for (let e = error, depth = 0; typeof e === 'object' && e !== null && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const { name, message } = e as { name?: unknown; message?: unknown };
    if (name === 'PermissionViolationError' || (typeof message === 'string' && /permissions violation/i.test(message))) return true;
  }
  return false;
}
