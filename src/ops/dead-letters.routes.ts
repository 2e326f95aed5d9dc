import { Hono } from 'hono';
import { z } from 'zod';
import type { Database } from '../db/open-database.ts';
import { BadRequestError, NotFoundError } from '../errors.ts';
import {
  countDeadLetters,
  deleteDeadLetters,
  pageDeadLetters,
  replayDeadLetter,
  replayDeadLetters,
  type DeadLetter,
  type ReplayReport,
} from '../inbox/dead-letters.ts';
import type { InboxDeps } from '../inbox/handle-once.ts';
import type { Logger } from '../logger.ts';
import { PageLimit, storedJson, validQuery } from './admin-query.ts';
import { requireBearer } from './bearer-auth.ts';
import { decodeCursor, encodeCursor } from './dead-letter-cursor.ts';
import { describeAdmin } from '../http/describe-route.ts';

/** A subscriber this process runs, as its admin routes reach it: its own database and its inbox deps (its one write queue). */
export type AdminSubscriber = { name: string; db: Database; inbox: InboxDeps };

export type DeadLetterRoutesDeps = { subscribers: readonly AdminSubscriber[]; adminToken: string; log: Logger };

const Cursor = z
  .string()
  .transform((text, ctx) => decodeCursor(text) ?? (ctx.addIssue({ code: 'custom', message: 'not the next of an earlier page' }), z.NEVER));

const ListQuery = z.object({ limit: PageLimit, after: Cursor.optional(), type: z.string().min(1).optional(), q: z.string().min(1).optional() });

/** A dead letter as the admin routes show it: the payload parsed when it is JSON, the time of death in ISO 8601 (null when none). */
function toItem(d: DeadLetter) {
  return {
    eventId: d.eventId,
    subject: d.subject,
    type: d.type,
    headers: d.headers,
    payload: storedJson(d.payload),
    error: d.error,
    deliveries: d.deliveries,
    deadAt: d.deadAt === null ? null : new Date(d.deadAt).toISOString(),
  };
}

/**
 * The dead-letter admin routes of the subscribers this process runs, behind `Authorization: Bearer <adminToken>`
 * (mount at /admin/subscribers): list them with their counts, page through a subscriber's dead letters (oldest
 * first, filtered by type and error text), replay one or all through the inbox, delete one or all (all needs
 * `?confirm=all` given once: any other or a repeated confirm is a 400 problem). Deletions are logged (warn) with
 * the event ids. An unknown subscriber is a 404 problem.
 */
export function createDeadLetterRoutes(deps: DeadLetterRoutesDeps): Hono {
  const byName = new Map(deps.subscribers.map((s) => [s.name, s]));
  const subscriberOf = (name: string): AdminSubscriber => {
    const s = byName.get(name);
    if (!s) throw new NotFoundError(`No subscriber named ${name} runs in this process (it runs: ${[...byName.keys()].join(', ') || 'none'}).`);
    return s;
  };
  const replay = async (s: AdminSubscriber, eventId: string | undefined) => {
    const report: ReplayReport =
      eventId === undefined ? await replayDeadLetters({ ...s.inbox, db: s.db }, 'all') : await replayDeadLetter({ ...s.inbox, db: s.db }, eventId);
    deps.log.info('dead letters replayed', {
      consumer: s.name,
      replayed: report.replayed.length,
      duplicates: report.duplicates.length,
      failed: report.failed.length,
    });
    return report;
  };
  const discard = (s: AdminSubscriber, eventId: string | undefined) =>
    deleteDeadLetters(s.inbox.writer, s.name, eventId, (eventIds) => deps.log.warn('dead letters deleted by an operator', { consumer: s.name, eventIds }));

  const app = new Hono();
  app.use('*', requireBearer(deps.adminToken));

  app.get('/', describeAdmin('List subscribers with their dead-letter counts'), async (c) =>
    c.json({ items: await Promise.all(deps.subscribers.map(async (s) => ({ name: s.name, deadLetters: await countDeadLetters(s.db, s.name) }))) }),
  );

  app.get('/:name/dead-letters', describeAdmin('List dead letters', { query: ListQuery, notFound: 'Unknown subscriber' }), validQuery(ListQuery), async (c) => {
    const s = subscriberOf(c.req.param('name'));
    const { limit, after, type, q } = c.req.valid('query');
    const page = await pageDeadLetters(s.db, s.name, { limit, after, type, q });
    return c.json({ items: page.items.map(toItem), next: page.next ? encodeCursor(page.next) : null });
  });

  app.post('/:name/dead-letters/replay-all', describeAdmin('Replay all dead letters', { notFound: 'Unknown subscriber' }), async (c) =>
    c.json(await replay(subscriberOf(c.req.param('name')), undefined)),
  );

  app.post('/:name/dead-letters/:eventId/replay', describeAdmin('Replay one dead letter', { notFound: 'Unknown subscriber or dead letter' }), async (c) => {
    const s = subscriberOf(c.req.param('name'));
    const eventId = c.req.param('eventId');
    const report = await replay(s, eventId);
    if (report.notFound.length > 0) throw new NotFoundError(`No dead letter ${eventId} for ${s.name}.`);
    return c.json(report);
  });

  app.delete('/:name/dead-letters/:eventId', describeAdmin('Delete one dead letter', { notFound: 'Unknown subscriber or dead letter' }), async (c) => {
    const s = subscriberOf(c.req.param('name'));
    const eventId = c.req.param('eventId');
    const deleted = await discard(s, eventId);
    if (deleted === 0) throw new NotFoundError(`No dead letter ${eventId} for ${s.name}.`);
    return c.json({ deleted });
  });

  app.delete('/:name/dead-letters', describeAdmin('Delete all dead letters (needs ?confirm=all)', { notFound: 'Unknown subscriber' }), async (c) => {
    const s = subscriberOf(c.req.param('name'));
    // every confirm value counts: `?confirm=all&confirm=no` is no confirmation
    const confirm = c.req.queries('confirm') ?? [];
    if (confirm.length !== 1 || confirm[0] !== 'all') throw new BadRequestError('Deleting every dead letter of a subscriber needs ?confirm=all, given once.');
    return c.json({ deleted: await discard(s, undefined) });
  });

  return app;
}
