// cmd.log and ctx.log as the service really wires them (createService: deps.log is the logger wrapped by
// recordRecentLogs for the status page), over real libSQL files and a private nats-server. The logger promises
// "logging never throws for its fields" (src/logger.ts): a BigInt or a cycle in a warn/error line must neither fail a
// command (500, nothing committed) nor fail a message (a retry, a spent delivery, a dead letter).
import { createClient } from '@libsql/client';
import { Hono } from 'hono';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { defineModules } from '../../src/compose/define-modules.ts';
import { commandRoute, ok } from '../../src/http/command-route.ts';
import { defineContext } from '../../src/http/define-context.ts';
import { defineSubscriber } from '../../src/inbox/subscriber.ts';
import type { Deps } from '../../src/deps.ts';
import { createLogger } from '../../src/logger.ts';
import { createSubscriberDb } from '../support/consumer.ts';
import { eventually } from '../support/eventually.ts';
import { postJson } from '../support/http.ts';
import { accountsContext } from '../support/fixture/accounts/context.ts';
import { auditLog } from '../support/fixture/subscribers/audit/tables.ts';
import { fixtureEvents, type FixtureEvents } from '../support/fixture/modules.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

const circular = () => {
  const o: Record<string, unknown> = { name: 'order' };
  o.self = o;
  return o;
};

/** Fields a handler may well log: a BigInt amount (a SQLite INTEGER read with intMode 'bigint'), a cyclic object. */
const HOSTILE_FIELDS: Record<string, () => Record<string, unknown>> = {
  'a BigInt': () => ({ amount: 12345678901234567890n }),
  'a circular object': () => ({ order: circular() }),
};

/** A context whose command logs `fields` at warn through cmd.log, then answers. */
const probeContext = defineContext({
  name: 'probe',
  basePath: '/probe',
  events: {} as never,
  routes: (deps: Deps) =>
    new Hono().post(
      '/',
      ...commandRoute(deps, z.strictObject({ kind: z.string() }), async function probe(_tx, body, cmd) {
        cmd.log.warn('probe: odd input', HOSTILE_FIELDS[body.kind]!());
        cmd.log.error('probe: odder input', HOSTILE_FIELDS[body.kind]!());
        return ok({ kind: body.kind });
      }),
    ),
});

let handlerCalls = 0;
/** Records every account event like `audit`, after logging hostile fields at warn through ctx.log. */
const loggy = defineSubscriber<FixtureEvents>()({
  name: 'loggy',
  on: {
    'account.opened.v1': async (tx, e, ctx) => {
      handlerCalls++;
      ctx.log.warn('loggy: applying', HOSTILE_FIELDS['a BigInt']!());
      ctx.log.warn('loggy: applying', HOSTILE_FIELDS['a circular object']!());
      await tx.insert(auditLog).values({ eventId: e.eventId, eventType: e.type, accountId: e.aggregateId, aggregateVersion: e.aggregateVersion }).run();
    },
  },
});

const modules = defineModules({ events: fixtureEvents, contexts: [accountsContext, probeContext as never], subscribers: [loggy] });

describe('logs - cmd.log with fields JSON cannot write never fails the command', () => {
  for (const kind of Object.keys(HOSTILE_FIELDS)) {
    it(`cmd.log.warn/error with ${kind}: the command answers 200 and the line is written`, async () => {
      const lines: string[] = [];
      await using s = await createTestService(
        { ROLES: 'api' },
        { connect: undefined, modules, log: createLogger('debug', (l) => lines.push(l), { service: 'test', version: '1' }) },
      );
      const res = await postJson(s.app, '/probe', { kind });
      expect(res.status, `POST /probe answered ${res.status}: ${await res.clone().text()}`).toBe(200);
      expect(lines.some((l) => (JSON.parse(l) as { msg: string }).msg === 'probe: odd input')).toBe(true);
      // /status.json renders the recorded warn/error lines
      expect((await s.app.request('/status.json')).status).toBe(200);
    });
  }
});

describe('logs - ctx.log with fields JSON cannot write never fails a message', () => {
  it('a subscriber handler logging a BigInt and a cycle at warn applies its event once: no retry, no dead letter', async () => {
    const stream = await freshStream(nats().nc, 'LOGGY');
    await using sdb = await createSubscriberDb({ subscriber: 'audit' });
    const lines: string[] = [];
    handlerCalls = 0;
    await using s = await createTestService(
      { ROLES: 'api,relay,consumers', CONSUMERS: 'loggy', NATS_URL: nats().url, CONSUMER_MAX_DELIVER: '3', ...streamEnv(stream) },
      {
        modules,
        openSubscriberDb: async () => createClient({ url: sdb.url, timeout: 5000 }),
        log: createLogger('debug', (l) => lines.push(l), { service: 'test', version: '1' }),
      },
    );
    expect((await postJson(s.app, '/accounts', { owner: 'ann' })).status).toBe(201);
    const count = async (sql: string) => Number((await sdb.client.execute(sql)).rows[0]![0]);
    await eventually(async () => (await count('SELECT count(*) FROM inbox')) + (await count('SELECT count(*) FROM dead_letters')) >= 1, {
      what: 'the event applied or dead-lettered',
      timeoutMs: 20_000,
    });
    const deadLetters = await sdb.client.execute('SELECT error FROM dead_letters');
    expect(
      deadLetters.rows.map((r) => String(r.error)),
      'a log call in the handler turned a good event into a dead letter',
    ).toEqual([]);
    expect(await count('SELECT count(*) FROM audit_log')).toBe(1);
    expect(handlerCalls, 'the handler was retried because its log call threw').toBe(1);
  }, 40_000);
});

describe("logs - a line's own fields never replace the fields every line carries", () => {
  it("cmd.log.info('x', { level, msg, time, service }) still writes level info, msg x and the service's name", async () => {
    const lines: string[] = [];
    const log = createLogger('debug', (l) => lines.push(l), { service: 'orders', version: '1' });
    // a handler logging a customer's tier (`level`), a message it received (`msg`), an upstream service name
    log.info('customer upgraded', { level: 'gold', msg: 'hello from upstream', time: 0, service: 'billing' });
    const line = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect({ level: line.level, msg: line.msg, service: line.service, timeIsIso: typeof line.time === 'string' }).toEqual({
      level: 'info',
      msg: 'customer upgraded',
      service: 'orders',
      timeIsIso: true,
    });
  });
});
