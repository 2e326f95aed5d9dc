// The example context's request body, for the example's tests and for benchmarks or process tests that drive the
// example service. Plain data (no import of src/contexts), so deleting the example leaves this file compiling.

/** A POST /orders body of the example context. */
export type OrderBody = { customerId: string; currency: string; items: Array<{ sku: string; quantity: number; unitPriceCents: number }> };

/** A valid POST /orders body (two lines, total 2999); `over` replaces fields. */
export function orderBody(over: Partial<OrderBody> = {}): OrderBody {
  return {
    customerId: 'cust-1',
    currency: 'EUR',
    items: [
      { sku: 'sku-1', quantity: 2, unitPriceCents: 1250 },
      { sku: 'sku-2', quantity: 1, unitPriceCents: 499 },
    ],
    ...over,
  };
}
