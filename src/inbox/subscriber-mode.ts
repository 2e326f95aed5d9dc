import type { SqlRunner } from '../db/open-database.ts';
import { DB_NOW_MS_SQL } from '../leases/lease-store.ts';
import { textOf, textOrBytes } from '../db/column-guards.ts';

/** How the instances of one subscriber share it: one consumer active in one of them, or one consumer per outbox partition. */
export type SubscriberMode = { partitioned: false } | { partitioned: true; partitions: number };

/** `single`, or `partitioned:<n>`: instances in two different modes never run at once. */
export const modeKey = (mode: SubscriberMode): string => (mode.partitioned ? `partitioned:${mode.partitions}` : 'single');

/** How many leases a subscriber in `mode` is split into. */
export const leaseCount = (mode: SubscriberMode): number => (mode.partitioned ? mode.partitions : 1);

// Each instance's mode is a row of lease_members in a scope of its own, `<subscriber>#mode:<mode key>`, renewed
// with its leases: the members of the subscriber's lease scope itself only ever belong to one mode.
const prefixOf = (subscriber: string) => `${subscriber}#mode:`;
// ':' + 1: the end of the range of every scope starting with the prefix
const prefixEndOf = (subscriber: string) => `${subscriber}#mode;`;

/** What enterMode found: `entered`, or the mode whose live instances keep this one out. */
export type ModeEntry = { entered: true } | { entered: false; otherMode: string; instances: string[] };

/**
 * In the caller's write transaction: unless an instance of `subscriber` in another mode is live (its mode row renewed
 * within `ttlMs`, by the database's clock), records `owner` as live in `mode` for `ttlMs` and answers entered;
 * otherwise records nothing and names the other mode. Run before an instance joins the subscriber's leases and with
 * each claim after that: write transactions are serialized, so two modes are never entered at once.
 */
export async function enterMode(tx: SqlRunner, o: { subscriber: string; mode: SubscriberMode; owner: string; ttlMs: number }): Promise<ModeEntry> {
  const now = Number((await tx.execute(`SELECT ${DB_NOW_MS_SQL} AS now`)).rows[0]!.now);
  const mine = prefixOf(o.subscriber) + modeKey(o.mode);
  const range = [prefixOf(o.subscriber), prefixEndOf(o.subscriber)];
  await tx.execute({ sql: 'DELETE FROM lease_members WHERE scope >= ?1 AND scope < ?2 AND expires_at < ?3', args: [...range, now - o.ttlMs] });
  const others = await tx.execute({
    sql: `SELECT ${textOrBytes('scope')} AS scope, ${textOrBytes('owner')} AS owner FROM lease_members
          WHERE scope >= ?1 AND scope < ?2 AND scope <> ?3 AND expires_at > ?4 ORDER BY lease_members.scope, lease_members.owner`,
    args: [...range, mine, now],
  });
  if (others.rows.length > 0) {
    // read through guards: a script's bytes that are no UTF-8 would abort the process in the driver
    const otherMode = textOf(others.rows[0]!.scope).slice(prefixOf(o.subscriber).length);
    return { entered: false, otherMode, instances: others.rows.map((r) => textOf(r.owner)) };
  }
  await tx.execute({
    sql: `INSERT INTO lease_members (scope, owner, expires_at, joined_at) VALUES (?1, ?2, ?3, ?4)
          ON CONFLICT (scope, owner) DO UPDATE SET expires_at = excluded.expires_at`,
    args: [mine, o.owner, now + o.ttlMs, now],
  });
  return { entered: true };
}

/** In the caller's write transaction: forgets `owner`'s mode row, so instances of another mode may start at once. */
export async function leaveMode(tx: SqlRunner, o: { subscriber: string; mode: SubscriberMode; owner: string }): Promise<void> {
  await tx.execute({ sql: 'DELETE FROM lease_members WHERE scope = ?1 AND owner = ?2', args: [prefixOf(o.subscriber) + modeKey(o.mode), o.owner] });
}
