const encoder = new TextEncoder();

/**
 * The stable 32-bit FNV-1a hash of an aggregate (type, NUL, id as UTF-8): the same on every runtime and release, so
 * every row of one aggregate lands in one partition and per-aggregate order lives inside it.
 */
export function aggregateHash(aggregateType: string, aggregateId: string): number {
  let h = 0x811c9dc5;
  for (const b of encoder.encode(`${aggregateType}\u0000${aggregateId}`)) h = Math.imul(h ^ b, 0x01000193);
  return h >>> 0;
}

/** The partition of an aggregate among `partitions`. */
export const partitionOf = (aggregateType: string, aggregateId: string, partitions: number) => aggregateHash(aggregateType, aggregateId) % partitions;
