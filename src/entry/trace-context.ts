// Node, Bun and Deno: the context manager that carries the active span across awaits, so every log line written
// while a request, a publish or an event is handled names its trace. An SDK started before this (e.g. with
// `node --import ./otel.mjs`) keeps the one it registered.
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';

/** Registers an AsyncLocalStorage context manager as the global one unless one is registered already. */
export function registerTraceContext(): void {
  const manager = new AsyncLocalStorageContextManager();
  if (context.setGlobalContextManager(manager.enable())) return;
  manager.disable();
}

/**
 * Flushes the spans the registered tracer provider still buffers (an SDK's batch processor), waiting at most
 * `timeoutMs`; does nothing without an SDK. Call before the process exits.
 */
export async function flushTraces(timeoutMs = 2000): Promise<void> {
  const provider = trace.getTracerProvider() as { getDelegate?: () => unknown };
  const delegate = (provider.getDelegate?.() ?? provider) as { forceFlush?: () => Promise<void> };
  if (typeof delegate.forceFlush !== 'function') return;
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([delegate.forceFlush().catch(() => undefined), new Promise((r) => (timer = setTimeout(r, timeoutMs)))]);
  clearTimeout(timer);
}
