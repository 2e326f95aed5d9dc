import { createClient } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { natsClient } from '../support/relay.ts';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTempDir, orderBody } from '../support/db.ts';
import { startNats } from '../support/nats.ts';
import { FAULT_ENTRY, freePort, runtimeCommand, spawnChild, spawnService, waitForHttp, type ChildHandle } from '../support/process.ts';
import { eventually } from '../support/service.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('subscriber process - crashes', () => {
  it('a subscriber SIGKILLed after commit and before ack, and again at random moments under load, ends with exact counts', async () => {
    const nats = await startNats();
    const tmp = createTempDir();
    cleanups.push(() => tmp[Symbol.dispose](), () => nats[Symbol.asyncDispose]());
    const env = {
      DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
      CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
      NATS_URL: nats.url,
      LOG_LEVEL: 'error',
      RELAY_POLL_MS: '20',
      CONSUMER_ACK_WAIT_MS: '1000',
      RELAY_BACKOFF_BASE_MS: '100',
      RELAY_MAX_BACKOFF_MS: '1000',
    };
    const api = await spawnService('node', 'src/entry/node.ts', { ...env, ROLES: 'api,relay' });
    cleanups.push(() => api.kill9());
    await waitForHttp(`${api.url}/health`, { child: api });

    const metricsPort = await freePort();
    // with a fault, the fault entry (crash hooks live in test code only); otherwise the production entry
    const consumer = (fault?: string): ChildHandle => {
      const { cmd, args } = fault ? runtimeCommand('node', FAULT_ENTRY) : runtimeCommand('node', 'src/entry/consume.ts');
      const entryArgs = fault ? ['consume', 'reporting'] : ['reporting'];
      const child = spawnChild(cmd, [...args, ...entryArgs], { ...env, METRICS_PORT: String(metricsPort), ...(fault ? { HONO_OUTBOX_TEST_FAULT: fault } : {}) });
      cleanups.push(() => child.kill9());
      return child;
    };

    let placed = 0;
    let totalCents = 0;
    let placing = true;
    const load = (async () => {
      while (placing) {
        const body = orderBody({ customerId: 'crash-customer' });
        const res = await fetch(`${api.url}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
        expect(res.status).toBe(201);
        placed++;
        totalCents += ((await res.json()) as { totalCents: number }).totalCents;
        await sleep(5);
      }
    })();

    // dies right after committing its 25th message, before acknowledging it
    const first = consumer('kill-after-commit:25');
    expect((await first.exited).signal).toBe('SIGKILL');
    for (const delay of [300, 700, 150]) {
      const c = consumer();
      await sleep(delay);
      await c.kill9();
    }
    placing = false;
    await load;

    const last = consumer();
    const reportUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    await waitForHttp(reportUrl, { child: last });
    const reporting = createClient({ url: env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'reporting') });
    cleanups.push(() => reporting.close());
    const report = async () =>
      (await reporting.execute("SELECT orders_placed, total_cents FROM customer_reports WHERE customer_id = 'crash-customer'")).rows[0];
    expect(await eventually(async () => Number((await report())?.orders_placed ?? 0) >= placed, 30_000)).toBe(true);
    await sleep(1500); // longer than ack_wait: any straggling redelivery has arrived

    const row = await report();
    expect(Number(row!.orders_placed)).toBe(placed);
    expect(Number(row!.total_cents)).toBe(totalCents);
    const inbox = await reporting.execute("SELECT count(*) FROM inbox WHERE consumer = 'reporting'");
    expect(Number(inbox.rows[0]![0])).toBe(placed);
    // the broker delivered more often than there are messages: the crashes did cause redeliveries, and the
    // exact counts above show the inbox recognised every one of them
    const nc = await natsClient(nats.url);
    const info = await (await jetstreamManager(nc)).consumers.info('EVENTS', 'reporting');
    await nc.close();
    expect(info.delivered.consumer_seq).toBeGreaterThan(placed);
    expect(info.num_pending + info.num_ack_pending).toBe(0);
    await last.stop('SIGTERM');
  });
});
