import type { Writer } from '../db/writer.ts';
import { deleteOlderThan, type CompactResult } from '../ops/compaction.ts';

/** The oldest keys first, through idx_idempotency_keys_created_at: each batch reads only the rows it deletes. */
const DELETE_BATCH_SQL = 'DELETE FROM idempotency_keys WHERE key IN (SELECT key FROM idempotency_keys WHERE created_at < ? ORDER BY created_at LIMIT ?)';

/**
 * Forgets Idempotency-Keys stored before `now - olderThanMs`, `batch` per write transaction through `writer`. A
 * retry with a forgotten key runs its command again, so `olderThanMs` is the replay window promised to clients
 * (IDEMPOTENCY_RETENTION).
 */
export async function compactIdempotencyKeys(
  deps: { writer: Writer; clock: () => Date },
  options: { olderThanMs: number; batch?: number; onBatch?: (progress: CompactResult) => void; signal?: AbortSignal },
): Promise<CompactResult & { cutoff: number }> {
  return deleteOlderThan(deps, DELETE_BATCH_SQL, options);
}
