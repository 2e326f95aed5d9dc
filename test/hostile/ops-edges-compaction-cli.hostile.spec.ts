// `npm run cli -- outbox:compact` in its own process over a populated database while this process serves commands on
// the same file: the API's writes wait at most about one batch, never their busy timeout (a command that did would
// fail), and interleaved pending and failed rows survive.
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { registryOf } from '../../src/compose/define-modules.ts';
import { parseConfig } from '../../src/config.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { openClient } from '../../src/entry/boot.ts';
import { silentLogger } from '../../src/logger.ts';
import { createTempDir } from '../support/db.ts';
import { FIXTURE_MIGRATIONS, fixtureModules } from '../support/fixture/modules.ts';
import { postJson } from '../support/http.ts';
import { runtimeCommand, spawnChild } from '../support/process.ts';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const ROWS = 100_000;

describe('outbox compaction in another process', () => {
  it('commands on the same file keep committing while the CLI compacts 100,000 sent rows, none waiting out its 1 s busy timeout, and pending and failed rows interleaved with them survive', async () => {
    const tmp = createTempDir();
    cleanups.push(() => tmp[Symbol.dispose]());
    const url = `file:${join(tmp.dir, 'app.db')}`;
    const client = await openClient(url, parseConfig({ DATABASE_URL: url, DATABASE_BUSY_TIMEOUT_MS: '1000' }));
    cleanups.push(() => client.close());
    await migrateDatabase(client, FIXTURE_MIGRATIONS.service);
    // every 1000th row is pending (never due) or failed, the rest sent long ago
    await client.execute(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS})
      INSERT INTO outbox (id, aggregate_type, aggregate_id, message_type, payload, status, occurred_at, available_at, sent_at, attempts)
      SELECT 'r' || i, 'account', 'a' || i, 'account.opened.v1', '{"pad":"${'x'.repeat(300)}"}',
             CASE WHEN i % 2000 = 0 THEN 'failed' WHEN i % 1000 = 0 THEN 'pending' ELSE 'sent' END, 0, ${Number.MAX_SAFE_INTEGER},
             CASE WHEN i % 1000 = 0 THEN NULL ELSE 1000 END, CASE WHEN i % 1000 = 0 THEN 1 ELSE 0 END FROM n`);
    const app = createApp(createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules)), { contexts: fixtureModules.contexts });

    const { cmd, args } = runtimeCommand('node', 'src/entry/cli.ts');
    const cli = spawnChild(cmd, [...args, 'outbox:compact', '--older-than', '1d', '--batch', '10000'], {
      DATABASE_URL: url,
      MIGRATE_ON_START: 'false',
      LOG_LEVEL: 'error',
    });
    cleanups.push(() => cli.kill9());
    let done = false;
    void cli.exited.then(() => (done = true));
    const until = Date.now() + 30_000;
    while (!cli.stdout().includes('batch 1:') && !done && Date.now() < until) await new Promise((r) => setTimeout(r, 1));
    const answers: Array<{ status: number }> = [];
    while (!done) answers.push({ status: (await postJson(app, '/accounts', { owner: 'during' })).status });
    expect((await cli.exited).code, cli.output()).toBe(0);
    expect(cli.stdout()).toContain(`deleted ${ROWS - ROWS / 1000} sent row(s)`);
    expect(answers.length).toBeGreaterThan(0);
    expect(answers.filter((a) => a.status !== 201)).toEqual([]);
    const left = await client.execute("SELECT status, count(*) AS n FROM outbox WHERE id LIKE 'r%' GROUP BY status ORDER BY status");
    expect(left.rows.map((r) => [r.status, Number(r.n)])).toEqual([
      ['failed', ROWS / 2000],
      ['pending', ROWS / 2000],
    ]);
  }, 60_000);
});
