// Node, Bun and Deno: the context manager that carries the active span across awaits, so every log line written
// while a request, a publish or an event is handled names its trace. An SDK started before this (e.g. with
// `node --import ./otel.mjs`) keeps the one it registered.
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';

/** Registers an AsyncLocalStorage context manager as the global one unless one is registered already. */
export function registerTraceContext(): void {
  const manager = new AsyncLocalStorageContextManager();
  if (context.setGlobalContextManager(manager.enable())) return;
  manager.disable();
}
