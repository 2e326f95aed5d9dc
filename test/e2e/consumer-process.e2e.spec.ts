import { createClient } from '@libsql/client';
import { jetstreamManager } from '@nats-io/jetstream';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { postJson } from '../support/http.ts';
import { natsClient, startNats } from '../support/nats.ts';
import {
  FAULT_ENTRY,
  FIXTURE_ENTRY,
  freePort,
  overHttp,
  runtimeCommand,
  spawnChild,
  spawnService,
  waitForHttp,
  withOutput,
  type ChildHandle,
} from '../support/process.ts';

// The fixture service (test/support/fixture) as real processes: its API and relay, and its `balances` subscriber
// alone, so this test keeps running when the example is deleted.

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('subscriber process - crashes', () => {
  it('a subscriber SIGKILLed after commit and before ack, and again at random moments under load, ends with exact counts', async () => {
    const nats = await startNats();
    const tmp = createTempDir();
    cleanups.push(
      () => tmp[Symbol.dispose](),
      () => nats[Symbol.asyncDispose](),
    );
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
    const api = await spawnService('node', FIXTURE_ENTRY, { ...env, ROLES: 'api,relay' });
    cleanups.push(() => api.kill9());
    await waitForHttp(`${api.url}/health`, { child: api });

    const metricsPort = await freePort();
    // with a fault, the fault entry (crash hooks live in test code only); otherwise the fixture's entry
    const consumer = (fault?: string): ChildHandle => {
      const { cmd, args } = runtimeCommand('node', fault ? FAULT_ENTRY : FIXTURE_ENTRY);
      const entryArgs = fault ? ['--fixture', 'consume', 'balances'] : [];
      const roles: Record<string, string> = fault ? { HONO_OUTBOX_TEST_FAULT: fault } : { ROLES: 'consumers', CONSUMERS: 'balances' };
      const child = spawnChild(cmd, [...args, ...entryArgs], { ...env, METRICS_PORT: String(metricsPort), ...roles });
      cleanups.push(() => child.kill9());
      return child;
    };

    // each round opens an account and credits it: two events of one aggregate
    let opened = 0;
    let credited = 0;
    let loading = true;
    const load = (async () => {
      const http = overHttp(api.url);
      for (let round = 1; loading; round++) {
        const open = await postJson(http, '/accounts', { owner: 'crash-owner' });
        expect(open.status).toBe(201);
        opened++;
        const { accountId } = (await open.json()) as { accountId: string };
        const deposit = await postJson(http, `/accounts/${accountId}/deposit`, { amountCents: round });
        expect(deposit.status).toBe(200);
        await deposit.body?.cancel();
        credited += round;
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
    loading = false;
    await load;

    const last = consumer();
    const reportUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    await waitForHttp(reportUrl, { child: last });
    const balances = createClient({ url: env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'balances') });
    cleanups.push(() => balances.close());
    const counters = async () => (await balances.execute("SELECT accounts_opened, credited_cents FROM owner_balances WHERE owner = 'crash-owner'")).rows[0];
    await withOutput(
      last,
      eventually(async () => Number((await counters())?.credited_cents ?? 0) >= credited, { timeoutMs: 30_000, what: 'every deposit in the balances' }),
    );
    await sleep(1500); // longer than ack_wait: any straggling redelivery has arrived

    const row = await counters();
    expect(Number(row!.accounts_opened)).toBe(opened);
    expect(Number(row!.credited_cents)).toBe(credited);
    const events = opened * 2;
    const inbox = await balances.execute("SELECT count(*) FROM inbox WHERE consumer = 'balances'");
    expect(Number(inbox.rows[0]![0])).toBe(events);
    // the broker delivered more often than there are messages: the crashes did cause redeliveries, and the
    // exact counts above show the inbox recognised every one of them
    const nc = await natsClient(nats.url);
    const info = await (await jetstreamManager(nc)).consumers.info('HONO_OUTBOX', 'hono-outbox-balances');
    await nc.close();
    expect(info.delivered.consumer_seq).toBeGreaterThan(events);
    expect(info.num_pending + info.num_ack_pending).toBe(0);
    await last.stop('SIGTERM');
  });
});
