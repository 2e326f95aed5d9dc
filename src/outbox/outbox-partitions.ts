import type { Transaction } from '@libsql/client';
import { sqlOf, type Database } from '../db/open-database.ts';
import type { Writer } from '../db/writer.ts';
import { textOf, textOrBytes } from '../db/column-guards.ts';
import { aggregateHash } from './partition.ts';
import { SENT_PENDING_COUNT } from './outbox-stats.ts';

/** The relay was asked for another partition count while rows are pending: moving them could split an aggregate's order. */
export class PartitionCountChangeError extends Error {
  override readonly name = 'PartitionCountChangeError';
}

/** The partition count outbox rows are spread over now (the one row of outbox_partitions). */
export async function readPartitionCount(tx: Pick<Transaction, 'execute'>): Promise<number> {
  const rs = await tx.execute('SELECT count FROM outbox_partitions WHERE id = 1');
  const count = Number(rs.rows[0]?.count);
  if (!Number.isInteger(count) || count < 1) throw new Error('outbox_partitions holds no partition count; run the migrations');
  return count;
}

/**
 * In the caller's write transaction: gives each unsent row without an aggregate_hash (stored by a release before
 * partitions, or cleared by a trigger of migration 0007) its hash and its partition under the current count, and
 * counts it in outbox_relay_epoch, so every relay reads from its oldest pending row again. Returns how many rows it changed.
 */
async function hashUnpartitionedRows(raw: Pick<Transaction, 'execute'>, count: number): Promise<number> {
  const legacy = await raw.execute(
    `SELECT seq, ${textOrBytes('aggregate_type')} AS aggregate_type, ${textOrBytes('aggregate_id')} AS aggregate_id
     FROM outbox INDEXED BY idx_outbox_unhashed WHERE aggregate_hash IS NULL AND status != 'sent'`,
  );
  if (legacy.rows.length === 0) return 0;
  // a script's bytes that are no text hash as the text shown for them: rows holding the same bytes share a partition
  const hashes = legacy.rows.map((r) => [Number(r.seq), aggregateHash(textOf(r.aggregate_type), textOf(r.aggregate_id))]);
  await raw.execute({
    sql: `UPDATE outbox SET aggregate_hash = j.h, partition = j.h % ?2
          FROM (SELECT value ->> '$[0]' AS seq, value ->> '$[1]' AS h FROM json_each(?1)) AS j WHERE outbox.seq = j.seq`,
    args: [JSON.stringify(hashes), count],
  });
  // every relay's floor is void now, not only the caller's: a row given its partition may sit below any of them
  await raw.execute('UPDATE outbox_relay_epoch SET retries_sent = retries_sent + 1 WHERE id = 1');
  return legacy.rows.length;
}

/**
 * Gives rows stored without a partition theirs (see hashUnpartitionedRows) when there are any — one read of a normally
 * empty index otherwise — through `writer`. Run by every relay pass before it reads, so such rows wait one pass at most.
 */
export async function givePartitions(db: Database, writer: Writer): Promise<number> {
  const any = await db.$client.execute("SELECT 1 FROM outbox INDEXED BY idx_outbox_unhashed WHERE aggregate_hash IS NULL AND status != 'sent' LIMIT 1");
  if (any.rows.length === 0) return 0;
  return writer.write(async (tx) => {
    const raw = sqlOf(tx);
    return hashUnpartitionedRows(raw, await readPartitionCount(raw));
  });
}

/** What applyPartitionCount found and did. */
export type PartitionCountChange = { previous: number; count: number; hashed: number };

/**
 * In one write transaction: gives the unsent rows stored before partitions existed (no aggregate_hash) their hash and
 * partition, then makes `count` the partition count. A change is refused with PartitionCountChangeError while any row is
 * pending (an aggregate's rows must never sit in two partitions that two relays publish at once); with none pending,
 * parked rows move to their new partition with it. Run by each relay before it claims leases.
 */
export async function applyPartitionCount(writer: Writer, count: number): Promise<PartitionCountChange> {
  return writer.write(async (tx) => {
    const raw = sqlOf(tx);
    const previous = await readPartitionCount(raw);
    const hashed = await hashUnpartitionedRows(raw, previous);
    if (count !== previous) {
      const pending = Number((await raw.execute(`SELECT (SELECT count(*) FROM outbox WHERE status = 'pending') - (${SENT_PENDING_COUNT}) AS n`)).rows[0]!.n);
      if (pending > 0) {
        throw new PartitionCountChangeError(
          `Refusing to start: OUTBOX_PARTITIONS is ${count} but the outbox is spread over ${previous} partitions and ${pending} rows are pending; start the relays with OUTBOX_PARTITIONS=${previous}, and change it once nothing is pending (stop the writers and let the relays drain).`,
        );
      }
      await raw.execute({ sql: 'UPDATE outbox_partitions SET count = ?1 WHERE id = 1', args: [count] });
      await raw.execute({ sql: "UPDATE outbox SET partition = aggregate_hash % ?1 WHERE status = 'failed' AND aggregate_hash IS NOT NULL", args: [count] });
    }
    return { previous, count, hashed };
  });
}
