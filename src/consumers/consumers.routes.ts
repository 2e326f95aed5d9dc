import { Hono } from 'hono';
import type { Database } from '../db/open-database.ts';
import { readCustomerReport } from './reporting/reporting.ts';

/** GET /reports/customers/:customerId from the reporting subscriber's database (zeros for an unknown customer). */
export function createReportRoutes(reportingDb: Database): Hono {
  const app = new Hono();
  app.get('/customers/:customerId', async (c) => c.json(await readCustomerReport(reportingDb, c.req.param('customerId'))));
  return app;
}
