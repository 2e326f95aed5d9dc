import { describe, expect, it } from 'vitest';
import { createTestApp, orderBody, tableCounts } from '../support/db.ts';

describe('orders - smoke', () => {
  it('a placed order can be read back', async () => {
    const t = await createTestApp();
    try {
      const res = await t.app.request('/orders', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(orderBody()) });
      expect(res.status).toBe(201);
      const body = (await res.json()) as { orderId: string; totalCents: number };
      expect(body.totalCents).toBe(2 * 1250 + 499);
      const get = await t.app.request(`/orders/${body.orderId}`);
      expect(get.status).toBe(200);
      expect(await tableCounts(t.client)).toEqual({ orders: 1, order_lines: 2, outbox: 1, idempotency_keys: 0 });
    } finally {
      t.close();
    }
  });
});
