// What ends a long-running process at run time. Transient failures (broker away, database busy) are handled where
// they happen: the relay and subscribers back off and retry, compaction retries at its next tick, a request gets
// a 503. So an error that reaches the process unhandled is a bug, never a transient condition, and it is fatal:
//  - an uncaught exception: the code that threw was interrupted half-way and its state is unknown;
//  - an unhandled rejection: work nobody awaits has failed; the loop that should have handled it may be wedged
//    while /health still answers ok, which is worse than a restart. Every write is transactional and every
//    publish and apply idempotent, so a supervisor's restart loses nothing.
// Both are logged as one JSON line with the stack (whatever LOG_LEVEL says), then the process stops gracefully
// and exits 1. Bad configuration and start-up refusals exit 2 before this is installed.
import { createLogger } from '../logger.ts';

/** How long the graceful stop after a fatal error may take before the process exits 1 anyway. */
export const FATAL_STOP_TIMEOUT_MS = 10_000;

/** Logs `what` at level error as one JSON line with `base` and the error's type, message and stack, even when LOG_LEVEL is silent. */
export function logFatal(what: string, reason: unknown, base: Record<string, unknown> = {}): void {
  createLogger('error', undefined, base).error(what, { error: reason instanceof Error ? reason : String(reason) });
}

/**
 * Installs process handlers that make an uncaught exception and an unhandled rejection fatal: each is logged by
 * logFatal (with `base`, e.g. service and version), then `onFatal(what)` runs; it must end the process with a non-zero code.
 */
export function exitOnFatalErrors(onFatal: (what: string) => void, base: Record<string, unknown> = {}): void {
  process.on('uncaughtException', (error) => {
    logFatal('uncaught exception', error, base);
    onFatal('uncaught exception');
  });
  process.on('unhandledRejection', (reason) => {
    logFatal('unhandled rejection', reason, base);
    onFatal('unhandled rejection');
  });
}
