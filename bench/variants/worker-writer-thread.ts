// Worker thread of the (f) experiment (bench/variants/worker-writer.ts): the database side of POST /orders - the
// order, its outbox row, one group-commit writer - run on a thread of its own. Receives batches of validated
// bodies, answers each batch with the 201 bodies once their group committed.
import { parentPort, workerData } from 'node:worker_threads';
import { registryOf } from '../../src/compose/define-modules.ts';
import { parseConfig } from '../../src/config.ts';
import { toOrderIntegrationEvents } from '../../src/contexts/orders/events.ts';
import { place, type PlaceOrder } from '../../src/contexts/orders/order.ts';
import { insertOrder } from '../../src/contexts/orders/store.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { openClient } from '../../src/entry/boot.ts';
import { createUuidV7 } from '../../src/ids.ts';
import { modules } from '../../src/modules.ts';
import { appendToOutbox } from '../../src/outbox/append-to-outbox.ts';

export type Placement = { id: number; body: PlaceOrder };
export type Placed = { id: number; status: number; location?: string; body: unknown };

const env = workerData as Record<string, string>;
const config = parseConfig(env);
const client = await openClient(config.DATABASE_URL, config);
const writer = createWriter(createDatabase(client));
const registry = registryOf(modules);
const newId = createUuidV7();

parentPort!.on('message', (batch: Placement[]) => {
  void Promise.all(
    batch.map(
      ({ id, body }): Promise<Placed> =>
        writer
          .write(async (tx) => {
            const now = new Date();
            const { order, events } = place(body, { id: newId(), now });
            await insertOrder(tx, order);
            await appendToOutbox(tx, toOrderIntegrationEvents(events, newId), { registry, now });
            return {
              id,
              status: 201,
              location: `/orders/${order.id}`,
              body: { orderId: order.id, status: order.status, totalCents: order.totalCents, currency: order.currency, placedAt: order.placedAt.toISOString() },
            };
          })
          .catch((error: unknown) => ({ id, status: 503, body: { title: String(error) } })),
    ),
  ).then((results) => parentPort!.postMessage(results));
});
parentPort!.postMessage('ready');
