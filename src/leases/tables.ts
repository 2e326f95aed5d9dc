import { integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core';

/**
 * Who may work on a partition of a scope (the relay's outbox partitions, or a subscriber's consumers): the owner,
 * an epoch bumped at every acquisition (writes of the partition's work are fenced by it) and when the lease runs out
 * by the database's clock (ms). A row with no owner, or one past its expiry, is free.
 */
export const leases = sqliteTable(
  'leases',
  {
    scope: text('scope').notNull(),
    partition: integer('partition').notNull(),
    owner: text('owner'),
    epoch: integer('epoch').notNull().default(0),
    expiresAt: integer('expires_at').notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.scope, t.partition] })],
);

/** The instances taking part in a scope's leases, each alive until its expiry (ms, database clock); the fair share divides by them. */
export const leaseMembers = sqliteTable(
  'lease_members',
  {
    scope: text('scope').notNull(),
    owner: text('owner').notNull(),
    expiresAt: integer('expires_at').notNull(),
    joinedAt: integer('joined_at').notNull(),
  },
  (t) => [primaryKey({ columns: [t.scope, t.owner] })],
);
