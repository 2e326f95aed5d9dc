import { Hono } from 'hono';
import type { Database } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import { NotFoundError } from '../errors.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { listFailed, requeueFailed } from '../outbox/failed-rows.ts';
import type { Signal } from '../signal.ts';
import { requireBearer } from './bearer-auth.ts';

export type OpsDeps = {
  db: Database;
  writer: Writer;
  clock: () => Date;
  metrics: Metrics;
  outboxCommitted: Signal;
  /** Admin routes exist only when a token is configured. */
  adminToken?: string | undefined;
};

/** GET /metrics (Prometheus text) and, with a token, the dead-letter admin routes under /admin/outbox. */
export function createOpsRoutes(deps: OpsDeps): Hono {
  const app = new Hono();
  app.get('/metrics', async (c) => c.text(await deps.metrics.render(), 200, { 'Content-Type': 'text/plain; version=0.0.4; charset=utf-8' }));

  if (deps.adminToken) {
    const admin = new Hono();
    admin.use('*', requireBearer(deps.adminToken));
    admin.get('/failed', async (c) => {
      const limit = Math.min(1000, Math.max(1, Number(c.req.query('limit') ?? 100) || 100));
      return c.json({ failed: await listFailed(deps.db, limit) });
    });
    admin.post('/failed/retry-all', async (c) => {
      const requeued = await deps.writer.write((tx) => requeueFailed(tx, undefined, deps.clock().getTime()));
      if (requeued > 0) deps.outboxCommitted.notify();
      return c.json({ requeued });
    });
    admin.post('/failed/:id/retry', async (c) => {
      const id = c.req.param('id');
      const requeued = await deps.writer.write((tx) => requeueFailed(tx, id, deps.clock().getTime()));
      if (requeued === 0) throw new NotFoundError(`No failed outbox row with id ${id}.`);
      deps.outboxCommitted.notify();
      return c.json({ requeued });
    });
    app.route('/admin/outbox', admin);
  }
  return app;
}
