import type { Transaction } from '@libsql/client';
import { textOf, textOrBytes } from '../db/column-guards.ts';

/** The database's clock in ms: one clock for every instance, whatever host it runs on (also through a remote URL). */
export const DB_NOW_MS_SQL = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)";

/** What one claim is asked to do. */
export type ClaimInput = {
  scope: string;
  owner: string;
  /** How many partitions the scope has now (0..partitions-1). */
  partitions: number;
  ttlMs: number;
  /** The epochs this instance believes it holds, by partition; a partition whose row says otherwise was lost. */
  held: ReadonlyMap<number, number>;
  /** Partitions found above the share by the previous claim and withdrawn from work since: released now if still above it. */
  draining?: ReadonlySet<number>;
};

/** What a claim did, by the database's clock. */
export type ClaimResult = {
  nowMs: number;
  /** Partition → epoch, after this claim: renewed, plus acquired, minus released and lost. */
  owned: Map<number, number>;
  /** Owned partitions above the fair share: renewed this time, to be withdrawn from work and released by the next claim. */
  surplus: number[];
  acquired: number[];
  released: number[];
  /** Held partitions that another instance took. */
  lost: number[];
  /** Held partitions at or above the partition count, which a lower count made obsolete: released, not lost. */
  dropped: number[];
  /** Live members, this one included. */
  members: number;
  /** This instance's fair share of the partitions. */
  share: number;
  /** When the next claim should run at the latest (ms from now): a third of the TTL, or as soon as another member's lease runs out. */
  nextInMs: number;
};

type LeaseRow = { partition: number; owner: string | null; epoch: number; expires_at: number };

/**
 * One round of the lease protocol for `owner`, inside a write transaction (`tx`): renews its membership and the leases
 * it still holds, then moves towards its fair share — floor(partitions ÷ live members), one more for the first
 * `partitions mod members` members by name — releasing partitions above it that the previous claim already reported as
 * surplus (`draining`; the rest above it is reported as surplus now), or taking free ones (no owner, or expired) up to
 * it. Acquiring bumps the partition's epoch. Never takes a live lease from another member.
 */
export async function claimLeases(tx: Transaction, input: ClaimInput): Promise<ClaimResult> {
  const { scope, owner, partitions, ttlMs } = input;
  const nowMs = Number((await tx.execute(`SELECT ${DB_NOW_MS_SQL} AS now`)).rows[0]!.now);
  const until = nowMs + ttlMs;
  await tx.execute({
    sql: `INSERT INTO lease_members (scope, owner, expires_at, joined_at) VALUES (?1, ?2, ?3, ?4)
          ON CONFLICT (scope, owner) DO UPDATE SET expires_at = excluded.expires_at`,
    args: [scope, owner, until, nowMs],
  });
  // members gone for a whole TTL are forgotten; their leases stay as they are, free once expired
  await tx.execute({ sql: 'DELETE FROM lease_members WHERE scope = ?1 AND expires_at < ?2', args: [scope, nowMs - ttlMs] });
  const memberRows = (
    await tx.execute({
      sql: `SELECT ${textOrBytes('owner')} AS owner, expires_at FROM lease_members WHERE scope = ?1 AND expires_at > ?2 ORDER BY lease_members.owner`,
      args: [scope, nowMs],
    })
  ).rows;
  // owners are read through a guard: a script's bytes that are no UTF-8 would abort the process in the driver
  const members = memberRows.map((r) => textOf(r.owner));
  await tx.execute({
    sql: 'INSERT OR IGNORE INTO leases (scope, partition, owner, epoch, expires_at) SELECT ?1, value, NULL, 0, 0 FROM json_each(?2)',
    args: [scope, JSON.stringify(Array.from({ length: partitions }, (_, i) => i))],
  });
  const rows = (
    await tx.execute({
      sql: `SELECT partition, ${textOrBytes('owner')} AS owner, epoch, expires_at FROM leases WHERE scope = ?1 AND partition < ?2 ORDER BY partition`,
      args: [scope, partitions],
    })
  ).rows.map((r) => ({ ...r, owner: r.owner === null ? null : textOf(r.owner) })) as unknown as LeaseRow[];

  const index = members.indexOf(owner);
  const base = Math.floor(partitions / members.length);
  const share = base + (index < partitions % members.length ? 1 : 0);

  const mine = rows.filter((r) => r.owner === owner && (!input.held.has(r.partition) || input.held.get(r.partition) === Number(r.epoch)));
  const dropped = [...input.held.keys()].filter((p) => p >= partitions);
  if (dropped.length > 0)
    await tx.execute({
      sql: 'UPDATE leases SET owner = NULL, expires_at = 0 WHERE scope = ?1 AND owner = ?2 AND partition >= ?3',
      args: [scope, owner, partitions],
    });
  const lost = [...input.held.keys()].filter((p) => p < partitions && !mine.some((r) => r.partition === p));
  const above = mine.slice(share);
  const released = above.filter((r) => input.draining?.has(r.partition)).map((r) => r.partition);
  const keep = mine.filter((r) => !released.includes(r.partition));
  const free = rows.filter((r) => r.owner !== owner && (r.owner === null || Number(r.expires_at) <= nowMs));
  const taking = free.slice(0, Math.max(0, share - mine.length)).map((r) => r.partition);

  if (keep.length > 0)
    await tx.execute({
      sql: 'UPDATE leases SET expires_at = ?1 WHERE scope = ?2 AND owner = ?3 AND partition IN (SELECT value FROM json_each(?4))',
      args: [until, scope, owner, JSON.stringify(keep.map((r) => r.partition))],
    });
  if (released.length > 0)
    await tx.execute({
      sql: 'UPDATE leases SET owner = NULL, expires_at = 0 WHERE scope = ?1 AND owner = ?2 AND partition IN (SELECT value FROM json_each(?3))',
      args: [scope, owner, JSON.stringify(released)],
    });
  const owned = new Map(keep.map((r) => [r.partition, Number(r.epoch)] as const));
  if (taking.length > 0) {
    const taken = await tx.execute({
      sql: `UPDATE leases SET owner = ?1, epoch = epoch + 1, expires_at = ?2
            WHERE scope = ?3 AND partition IN (SELECT value FROM json_each(?4)) AND (owner IS NULL OR expires_at <= ?5)
            RETURNING partition, epoch`,
      args: [owner, until, scope, JSON.stringify(taking), nowMs],
    });
    for (const r of taken.rows) owned.set(Number(r.partition), Number(r.epoch));
  }

  // Wake when the first other member's membership or lease would run out: a dead member's partitions are free then.
  let nextInMs = Math.floor(ttlMs / 3);
  for (const r of memberRows) if (textOf(r.owner) !== owner) nextInMs = Math.min(nextInMs, Number(r.expires_at) - nowMs + 5);
  for (const r of rows)
    if (r.owner !== null && r.owner !== owner && Number(r.expires_at) > nowMs) nextInMs = Math.min(nextInMs, Number(r.expires_at) - nowMs + 5);
  return {
    nowMs,
    owned,
    surplus: above.filter((r) => !released.includes(r.partition)).map((r) => r.partition),
    acquired: [...owned.keys()].filter((p) => !input.held.has(p)),
    released,
    lost,
    dropped,
    members: members.length,
    share,
    nextInMs: Math.max(10, nextInMs),
  };
}

/** Gives up every lease and the membership of `owner` in `scope` (graceful stop), inside a write transaction. */
export async function releaseLeases(tx: Transaction, scope: string, owner: string): Promise<number> {
  const res = await tx.execute({ sql: 'UPDATE leases SET owner = NULL, expires_at = 0 WHERE scope = ?1 AND owner = ?2', args: [scope, owner] });
  await tx.execute({ sql: 'DELETE FROM lease_members WHERE scope = ?1 AND owner = ?2', args: [scope, owner] });
  return res.rowsAffected;
}
