// The Cloudflare Workers entry, bundled by the pinned wrangler and run in workerd (`wrangler dev --local`), offline.
// These tests give the worker no reachable database: they cover the bundle, an unreachable database and the cron
// relay's connection; test/hostile/worker-remote-db.hostile.spec.ts runs it over a libSQL server (sqld).
import { jetstreamManager } from '@nats-io/jetstream';
import { millis } from '@nats-io/nats-core';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { orderBody } from '../support/example-orders.ts';
import { postJson } from '../support/http.ts';
import { natsClient, startNats } from '../support/nats.ts';
import { freePort, overHttp, withOutput } from '../support/process.ts';
import { runGroupToExit } from '../support/process-group.ts';
import { OFFLINE, startWorker, WRANGLER } from '../support/wrangler.ts';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** A local URL where nothing listens: the database the worker is told to use cannot be reached. */
async function closedDatabaseUrl(): Promise<string> {
  return `http://127.0.0.1:${await freePort()}`;
}

describe('worker - the Workers entry bundled by wrangler and run in workerd', () => {
  it('wrangler deploy --dry-run bundles src/entry/worker.ts offline, with no node:* module in the bundle', async () => {
    const out = createTempDir('hono-outbox-bundle-');
    cleanups.push(() => out[Symbol.dispose]());
    const meta = join(out.dir, 'meta.json');
    const res = await runGroupToExit(process.execPath, [WRANGLER, 'deploy', '--dry-run', '--outdir', out.dir, '--metafile', meta], OFFLINE, {
      timeoutMs: 60_000,
    });
    expect(res.code, res.output).toBe(0);
    expect(existsSync(join(out.dir, 'worker.js'))).toBe(true);

    const inputs = (JSON.parse(readFileSync(meta, 'utf8')) as { inputs: Record<string, { imports: Array<{ path: string }> }> }).inputs;
    const nodeImports = Object.entries(inputs).flatMap(([file, i]) =>
      i.imports.filter((imp) => imp.path.startsWith('node:')).map((imp) => `${file} -> ${imp.path}`),
    );
    expect(nodeImports).toEqual([]);
    // the web client (hrana over fetch), not the native driver, is what the worker talks to the database with
    expect(Object.keys(inputs).some((f) => f.includes('@libsql/client/lib-esm/web.js'))).toBe(true);
    expect(Object.keys(inputs).some((f) => f.includes('@libsql/client/lib-esm/node.js') || f.includes('node_modules/libsql/'))).toBe(false);
  });

  it('fetch - workerd serves /health, and a command against an unreachable database answers 503 problem+json with Retry-After', async () => {
    const worker = await startWorker({ DATABASE_URL: await closedDatabaseUrl() }, cleanups);

    const health = await fetch(`${worker.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok' });

    const placed = await postJson(overHttp(worker.url), '/orders', orderBody());
    expect(placed.status, worker.child.output()).toBe(503);
    expect(placed.headers.get('content-type')).toBe('application/problem+json');
    expect(placed.headers.get('retry-after')).toBe('1');
    expect(await placed.json()).toMatchObject({ status: 503, title: 'Service unavailable', instance: '/orders' });

    // reads go through drizzle, which wraps the driver's error: still a 503, not a 500
    const stats = await fetch(`${worker.url}/outbox/stats`);
    expect(stats.status, worker.child.output()).toBe(503);
    await stats.body?.cancel();
    const ready = await fetch(`${worker.url}/ready`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toMatchObject({ status: 'unavailable', database: 'unavailable' });

    // invalid input is still refused before any database work
    const invalid = await postJson(overHttp(worker.url), '/orders', {});
    expect(invalid.status).toBe(400);
    await invalid.body?.cancel();
  });

  it('scheduled - the cron relay in workerd connects to NATS over WebSocket and creates the stream, then backs off at the unreachable outbox and says so', async () => {
    await using nats = await startNats({ websocket: true });
    const worker = await startWorker(
      {
        DATABASE_URL: await closedDatabaseUrl(),
        NATS_WS_URL: `ws://127.0.0.1:${nats.wsPort}`,
        RELAY_TIME_LIMIT_MS: '10000',
      },
      cleanups,
    );

    const tick = await fetch(`${worker.url}/__scheduled?cron=*+*+*+*+*`);
    expect(tick.status).toBe(200);
    await tick.body?.cancel();

    // the stream exists only if the worker's relay reached JetStream through wsconnect inside workerd
    const nc = await natsClient(nats.url);
    cleanups.push(() => nc.close());
    const jsm = await jetstreamManager(nc);
    const info = await withOutput(
      worker.child,
      eventually(() => jsm.streams.info('HONO_OUTBOX').catch(() => undefined), { timeoutMs: 20_000, what: 'the stream' }),
    );
    expect(info!.config.subjects).toEqual(['hono-outbox.>']);
    expect(millis(info!.config.duplicate_window)).toBe(10 * 60 * 1000);
    expect(info!.state.messages).toBe(0);

    // then the pass needs the outbox, which no libSQL server here can provide: it backs off and says so
    const backingOff = async () => worker.child.output().includes('relay: database unavailable, backing off');
    await withOutput(worker.child, eventually(backingOff, { timeoutMs: 20_000, what: 'the relay backing off' }));
  });
});
