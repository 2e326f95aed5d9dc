import type { ApiOf } from '../../http/api-type.ts';
import { defineContext } from '../../http/define-context.ts';
import { orderEvents } from './events.ts';
import { createOrderRoutes } from './routes.ts';

/** The example context: orders placed and cancelled over HTTP, publishing `order.placed.v1` and `order.cancelled.v1`. */
export const orders = defineContext({ name: 'orders', basePath: '/orders', events: orderEvents, routes: createOrderRoutes });

/** The orders API's type, for a typed client: `hc<OrdersApi>(baseUrl).orders.$post({ json })` (hono/client). */
export type OrdersApi = ApiOf<[typeof orders]>;
