// commandRoute's contract at its edges: a refusal decided after events were emitted leaves nothing behind, and a
// body-less success status is answered without a body.
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createApp } from '../../src/app.ts';
import { ConflictError } from '../../src/errors.ts';
import { commandRoute, refuse } from '../../src/http/command-route.ts';
import { accountCommands, expectResponse } from '../support/accounts.ts';
import { countRows, createTestDb } from '../support/db.ts';
import { postJson } from '../support/http.ts';

const Body = z.strictObject({ accountId: z.string() });

describe('commandRoute - refusals and body-less answers', () => {
  it('a command that emits an event and then refuses answers its refusal, and neither its writes nor its event are committed, while the commands sharing its commit are', async () => {
    await using t = await createTestDb();
    const accounts = accountCommands(t.deps);
    const id = await accounts.open('owner-1');
    const before = await countRows(t.client, 'outbox');
    const app = createApp(t.deps, {
      extend: (a) =>
        a.route(
          '/late',
          new Hono().post(
            '/',
            ...commandRoute(t.deps, Body, async (tx, body, cmd) => {
              await tx.run(`UPDATE accounts SET owner = 'changed' WHERE id = '${body.accountId}'`);
              await cmd.emit([
                {
                  eventId: cmd.newId(),
                  type: 'account.closed.v1',
                  aggregateType: 'account',
                  aggregateId: body.accountId,
                  aggregateVersion: 9,
                  occurredAt: cmd.now.toISOString(),
                  data: { accountId: body.accountId, owner: 'owner-1', balanceCents: 0 },
                },
              ]);
              return refuse(new ConflictError('refused after writing'));
            }),
          ),
        ),
    });
    // the refusing command shares a commit group with two good ones
    const [late, ...others] = await Promise.all([postJson(app, '/late', { accountId: id }), accounts.deposit(id, 5), accounts.deposit(id, 7)]);
    expect(late.status).toBe(409);
    for (const o of others) expectResponse(o);
    expect(await countRows(t.client, 'outbox')).toBe(before + 2); // the two deposits' events, not the refused one's
    expect(await countRows(t.client, 'accounts', "owner = 'changed'")).toBe(0);
    expect(await countRows(t.client, 'outbox', "message_type = 'account.closed.v1'")).toBe(0);
  });

  it('a command answering 204 gets an empty 204, not a 500', async () => {
    await using t = await createTestDb();
    const app = createApp(t.deps, {
      extend: (a) => a.route('/noop', new Hono().post('/', ...commandRoute(t.deps, Body, async () => ({ status: 204, body: null })))),
    });
    const res = await postJson(app, '/noop', { accountId: 'x' });
    expect(res.status).toBe(204);
    expect(await res.text()).toBe('');
  });
});
