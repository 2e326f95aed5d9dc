// A refused command (404, 409, 422) is an expected outcome: it must cost only itself, never a rollback or a re-run
// of the commands that share its group commit.
import { createClient, type Client, type Transaction } from '@libsql/client';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createApp } from '../../src/app.ts';
import { registryOf } from '../../src/compose/define-modules.ts';
import { migrateDatabase } from '../../src/db/migrate.ts';
import { createDatabase, prepareLocalDatabase } from '../../src/db/open-database.ts';
import { createDeps } from '../../src/deps.ts';
import { createUuidV7 } from '../../src/ids.ts';
import { silentLogger } from '../../src/logger.ts';
import { countRows, createTempDir } from '../support/db.ts';
import { FIXTURE_MIGRATIONS, fixtureModules } from '../support/fixture/modules.ts';
import { postJson } from '../support/http.ts';

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

type Counts = { transactions: number; rollbacks: number; savepoints: number; commits: number };

/**
 * The real client of a real database file, watched: every call goes to it unchanged, and the counters record the
 * transactions it opened and how they ended, and the savepoints run inside them.
 */
function watchedClient(real: Client): { client: Client; counts: Counts } {
  const counts: Counts = { transactions: 0, rollbacks: 0, savepoints: 0, commits: 0 };
  const forward = <T extends object>(target: T, prop: string | symbol) => {
    const value = Reflect.get(target, prop, target);
    return typeof value === 'function' ? value.bind(target) : value;
  };
  const watchTx = (tx: Transaction): Transaction =>
    new Proxy(tx, {
      get(target, prop) {
        if (prop === 'rollback') counts.rollbacks++;
        if (prop === 'commit') counts.commits++;
        if (prop === 'execute') {
          return (stmt: string | { sql: string }, ...rest: unknown[]) => {
            const sql = typeof stmt === 'string' ? stmt : stmt.sql;
            if (/^\s*(SAVEPOINT|ROLLBACK TO)\b/i.test(sql)) counts.savepoints++;
            return (target.execute as (...a: unknown[]) => unknown)(stmt, ...rest);
          };
        }
        return forward(target, prop);
      },
    });
  const client = new Proxy(real, {
    get(target, prop) {
      if (prop === 'transaction') {
        return async (...args: Parameters<Client['transaction']>) => {
          counts.transactions++;
          return watchTx(await target.transaction(...args));
        };
      }
      return forward(target, prop);
    },
  });
  return { client, counts };
}

async function watchedApp() {
  const tmp = createTempDir();
  cleanups.push(() => tmp[Symbol.dispose]());
  const url = `file:${join(tmp.dir, 'app.db')}`;
  const real = createClient({ url, timeout: 5000 });
  cleanups.push(() => real.close());
  await prepareLocalDatabase(real);
  await migrateDatabase(real, FIXTURE_MIGRATIONS.service);
  const { client, counts } = watchedClient(real);
  let idsDrawn = 0;
  const uuid = createUuidV7();
  const deps = createDeps(createDatabase(client), silentLogger, registryOf(fixtureModules), {
    newId: () => {
      idsDrawn++;
      return uuid();
    },
  });
  const fresh = createClient({ url });
  cleanups.push(() => fresh.close());
  return { app: createApp(deps, { contexts: fixtureModules.contexts }), counts, idsDrawn: () => idsDrawn, fresh };
}

describe('command refusals - a refused command costs only itself', () => {
  it('404, 409 and 422 answered among 30 concurrent commands: their shared transactions commit with no rollback, no savepoint and no command run twice', async () => {
    const { app, counts, idsDrawn, fresh } = await watchedApp();
    const opened = (await (await postJson(app, '/accounts', { owner: 'ann' })).json()) as { accountId: string };
    expect((await postJson(app, `/accounts/${opened.accountId}/close`)).status).toBe(200);
    expect((await postJson(app, '/accounts', { owner: 'ann' }, { 'idempotency-key': 'k-1' })).status).toBe(201);
    const before = { ...counts };
    const idsBefore = idsDrawn();

    const N = 30;
    const requests = [
      ...Array.from({ length: N }, (_, i) => postJson(app, '/accounts', { owner: `c-${i}` })),
      postJson(app, `/accounts/${opened.accountId}/deposit`, { amountCents: 5 }),
      postJson(app, '/accounts/no-such-account/close'),
      postJson(app, '/accounts', { owner: 'someone-else' }, { 'idempotency-key': 'k-1' }),
    ];
    const statuses = (await Promise.all(requests)).map((r) => r.status);

    expect(statuses).toEqual([...Array(N).fill(201), 409, 404, 422]);
    expect(counts.rollbacks - before.rollbacks).toBe(0);
    expect(counts.savepoints - before.savepoints).toBe(0);
    expect(counts.commits - before.commits).toBe(counts.transactions - before.transactions);
    // Commands were grouped (fewer transactions than commands), and each opened account drew its two ids once.
    expect(counts.transactions - before.transactions).toBeLessThan(N + 3);
    expect(idsDrawn() - idsBefore).toBe(2 * N);
    expect(await countRows(fresh, 'accounts', "owner LIKE 'c-%'")).toBe(N);
  });

  it('a 409 alone in its transaction commits it rather than rolling it back', async () => {
    const { app, counts } = await watchedApp();
    const opened = (await (await postJson(app, '/accounts', { owner: 'ann' })).json()) as { accountId: string };
    expect((await postJson(app, `/accounts/${opened.accountId}/close`)).status).toBe(200);
    const before = { ...counts };
    const res = await postJson(app, `/accounts/${opened.accountId}/close`);
    expect(res.status).toBe(409);
    expect(res.headers.get('content-type')).toBe('application/problem+json');
    expect({ rollbacks: counts.rollbacks - before.rollbacks, commits: counts.commits - before.commits }).toEqual({ rollbacks: 0, commits: 1 });
  });
});
