// Test helpers over the fixture context: its commands run as a caller would run them, its events built as it emits them.
import { z } from 'zod';
import type { Tx } from '../../src/db/open-database.ts';
import type { Deps } from '../../src/deps.ts';
import type { EventOf } from '../../src/events/define-events.ts';
import { createCommand, type Command, type CommandOutcome } from '../../src/http/command-route.ts';
import type { CommandResponse } from '../../src/http/idempotency.ts';
import type { Subscriber, SubscriberHandler } from '../../src/inbox/subscriber.ts';
import { closeAccount, deposit, openAccount } from './fixture/accounts/commands.ts';
import { fixtureEvents, type FixtureEvents } from './fixture/modules.ts';

/** The response of a command that was not refused; throws with the refusal otherwise. */
export function expectResponse(outcome: CommandOutcome): CommandResponse {
  if ('problem' in outcome) throw new Error(`command refused: ${outcome.problem.message}`);
  return outcome;
}

const AccountBody = z.object({ accountId: z.string() });

/** What the account commands need: the writer they run in and what a Command is built from. */
export type CommandDeps = Pick<Deps, 'writer' | 'registry' | 'clock' | 'newId'>;

/**
 * The fixture's commands bound to `deps`, each in its own write (concurrent calls share group commits): `open`
 * returns the new account's id, `deposit` and `close` their outcome (a refusal is a value).
 */
export function accountCommands(deps: CommandDeps) {
  const run = <I>(handler: (tx: Tx, input: I, cmd: Command) => Promise<CommandOutcome>, input: I, params: Record<string, string> = {}) =>
    deps.writer.write((tx) => handler(tx, input, createCommand(tx, deps, { params })));
  return {
    open: async (owner = 'ann') => AccountBody.parse(expectResponse(await run(openAccount, { owner })).body).accountId,
    /** Opens `n` accounts at once (owners `owner-<i % 50>`), sharing commits; their ids in order. */
    openMany: (n: number) =>
      Promise.all(
        Array.from({ length: n }, (_, i) => run(openAccount, { owner: `owner-${i % 50}` }).then((o) => AccountBody.parse(expectResponse(o).body).accountId)),
      ),
    deposit: (accountId: string, amountCents: number) => run(deposit, { amountCents }, { id: accountId }),
    close: (accountId: string) => run(closeAccount, {}, { id: accountId }),
  };
}

let eventNo = 0;
/** Envelope of the fixture's next event: a fresh event id and a distinct time. */
function envelope(accountId: string | undefined, version: number, eventId: string | undefined) {
  eventNo++;
  return {
    eventId: eventId ?? `evt-${process.pid}-${eventNo}`,
    aggregateType: 'account',
    aggregateId: accountId ?? `acc-${process.pid}-${eventNo}`,
    aggregateVersion: version,
    occurredAt: new Date(Date.UTC(2026, 0, 1, 0, 0, 0, eventNo)).toISOString(),
  };
}

type EventOver = { accountId?: string; owner?: string; eventId?: string; version?: number };

/** An `account.opened.v1` event as the fixture emits it (a new account unless `accountId` is given). */
export function openedEvent(over: EventOver = {}): EventOf<FixtureEvents, 'account.opened.v1'> {
  const e = envelope(over.accountId, over.version ?? 1, over.eventId);
  return { ...e, type: 'account.opened.v1', data: { accountId: e.aggregateId, owner: over.owner ?? 'ann' } };
}

/** An `account.credited.v1` event of `amountCents` (default 100) as the fixture emits it. */
export function creditedEvent(over: EventOver & { amountCents?: number } = {}): EventOf<FixtureEvents, 'account.credited.v1'> {
  const e = envelope(over.accountId, over.version ?? 2, over.eventId);
  return { ...e, type: 'account.credited.v1', data: { accountId: e.aggregateId, owner: over.owner ?? 'ann', amountCents: over.amountCents ?? 100 } };
}

/** A test's own subscriber called `name`, applying every fixture event type with `handle`. */
export function testSubscriber(name: string, handle: SubscriberHandler): Subscriber {
  return { name, types: Object.keys(fixtureEvents), handle };
}
