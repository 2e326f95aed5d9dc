// Deno smoke test (`deno task test`): the core's app, its libSQL database and a command's transaction on Deno's
// runtime, over the test fixture's composition. Vitest does not collect it (it runs `*.spec.ts`).
import { createTestApp, countRows } from '../support/db.ts';

declare const Deno: { test(name: string, fn: () => Promise<void>): void };

function check(ok: boolean, message: string): void {
  if (!ok) throw new Error(message);
}

Deno.test('deno - the app answers /health and a command stores its state and its outbox row in one transaction', async () => {
  await using t = await createTestApp();
  const health = await t.app.request('/health');
  check(health.status === 200, `/health answered ${health.status}`);

  const post = await t.app.request('/accounts', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ owner: 'deno' }) });
  check(post.status === 201, `POST /accounts answered ${post.status}: ${await post.clone().text()}`);
  const { accountId } = (await post.json()) as { accountId: string };
  const get = await t.app.request(`/accounts/${accountId}`);
  check(get.status === 200, `GET /accounts/${accountId} answered ${get.status}`);
  check((await countRows(t.client, 'outbox', 'aggregate_id = ?', [accountId])) === 1, 'the command wrote no outbox row');
});
