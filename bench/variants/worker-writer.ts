// Variant (f), an experiment for `npm run bench:commands`: the real app's middleware and POST /orders validation on
// the event loop, the database work (order + outbox row in one group-commit transaction) on a worker thread, so
// HTTP parsing and SQLite can use both cores. The bodies of one event-loop turn go to the worker in one message.
import { Worker } from 'node:worker_threads';
import type { Hono } from 'hono';
import { Hono as HonoApp } from 'hono';
import { createApp } from '../../src/app.ts';
import type { Deps } from '../../src/deps.ts';
import { requireJson, validJson } from '../../src/http/json-body.ts';
import { PlaceOrderBody } from '../../src/contexts/orders/routes.ts';
import type { Placed, Placement } from './worker-writer-thread.ts';

/** Starts the worker over the service database named in `env`; resolves once it is ready. */
export async function startWriterThread(env: Record<string, string>) {
  // a worker does not inherit the parent's --import tsx: it registers tsx's loader before importing the thread's module
  const thread = new URL('./worker-writer-thread.ts', import.meta.url).href;
  const boot = `import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(thread)}); })`;
  const worker = new Worker(boot, { eval: true, workerData: env });
  await new Promise<void>((resolve, reject) => {
    worker.once('message', () => resolve());
    worker.once('error', reject);
  });
  const waiting = new Map<number, (p: Placed) => void>();
  const BATCH = Number(env.WORKER_BATCH ?? 8);
  const flush = () => {
    if (batch.length === 0) return;
    const b = batch;
    batch = [];
    worker.postMessage(b);
  };
  let nextId = 0;
  let batch: Placement[] = [];
  worker.on('message', (results: Placed[]) => {
    for (const r of results) {
      waiting.get(r.id)?.(r);
      waiting.delete(r.id);
    }
  });
  return {
    place(body: Placement['body']): Promise<Placed> {
      const id = nextId++;
      if (batch.length === 0) setImmediate(flush);
      batch.push({ id, body });
      // a batch goes as soon as it is BATCH long: the worker commits it while this thread reads the next requests
      if (batch.length >= BATCH) flush();
      return new Promise((resolve) => waiting.set(id, resolve));
    },
    close: () => worker.terminate(),
  };
}

/** The service app with a POST /orders whose database work runs on the writer thread. */
export function createWorkerWriterApp(deps: Deps, thread: Awaited<ReturnType<typeof startWriterThread>>): Hono {
  const orders = new HonoApp();
  orders.post('/', requireJson(), validJson(PlaceOrderBody), async (c) => {
    const placed = await thread.place(c.req.valid('json'));
    if (placed.location) c.header('Location', placed.location);
    return c.json(placed.body as object, placed.status as 201);
  });
  return createApp(deps, { api: false, extend: (app) => app.route('/orders', orders) });
}
