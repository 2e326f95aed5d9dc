import { Hono } from 'hono';
import { z } from 'zod';
import type { Database } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import { NotFoundError } from '../errors.ts';
import type { Metrics } from '../metrics/metrics.ts';
import { pageFailed, requeueFailed, type FailedRow } from '../outbox/failed-rows.ts';
import type { Signal } from '../signal.ts';
import { decimalParam, PageLimit, storedJson, validQuery } from './admin-query.ts';
import { describeAdmin } from '../http/describe-route.ts';
import { requireBearer } from './bearer-auth.ts';
import { describeRoute } from 'hono-openapi';

const FailedQuery = z.object({ limit: PageLimit, after: decimalParam(0).optional() });

/** A failed row as the admin routes show it: the stored event parsed. */
const toFailedItem = (r: FailedRow) => ({ ...r, payload: storedJson(r.payload) });

const describeMetrics = describeRoute({
  summary: 'Prometheus metrics',
  responses: { 200: { description: 'Prometheus text exposition format.', content: { 'text/plain': { schema: { type: 'string' } } } } },
});

export type OpsDeps = {
  db: Database;
  writer: Writer;
  clock: () => Date;
  metrics: Metrics;
  outboxCommitted: Signal;
  /** Admin routes exist only when a token is configured. */
  adminToken?: string | undefined;
};

/** GET /metrics (Prometheus text) and, with a token, the failed-outbox-row admin routes under /admin/outbox (paged by seq). */
export function createOpsRoutes(deps: OpsDeps): Hono {
  const app = new Hono();
  app.get('/metrics', describeMetrics, async (c) => c.text(await deps.metrics.render(), 200, { 'Content-Type': 'text/plain; version=0.0.4; charset=utf-8' }));

  if (deps.adminToken) {
    const admin = new Hono();
    admin.use('*', requireBearer(deps.adminToken));
    admin.get('/failed', describeAdmin('Failed outbox rows, paged by seq', { query: FailedQuery }), validQuery(FailedQuery), async (c) => {
      const page = await pageFailed(deps.db, c.req.valid('query'));
      return c.json({ items: page.items.map(toFailedItem), next: page.next ?? null });
    });
    admin.post('/failed/retry-all', describeAdmin('Re-queue every failed outbox row'), async (c) => {
      const requeued = await deps.writer.write((tx) => requeueFailed(tx, undefined, deps.clock().getTime()));
      if (requeued > 0) deps.outboxCommitted.notify();
      return c.json({ requeued });
    });
    admin.post('/failed/:id/retry', describeAdmin('Re-queue one failed outbox row', { notFound: 'No failed outbox row has this id.' }), async (c) => {
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
