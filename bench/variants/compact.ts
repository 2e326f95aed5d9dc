// `node --import tsx bench/variants/compact.ts`: what `npm run cli -- outbox:compact` does (compactOutbox over
// DATABASE_URL, batches of COMPACT_BATCH), printing one JSON line with a wall-clock time per step so bench:cleanup
// knows exactly when deleting started and ended. Deletes `sent` rows with sent_at < COMPACT_CUTOFF_MS.
import { createDatabase } from '../../src/db/open-database.ts';
import { createWriter } from '../../src/db/writer.ts';
import { loadConfigOrExit, openClient } from '../../src/entry/boot.ts';
import { compactOutbox } from '../../src/outbox/compact-outbox.ts';

const config = loadConfigOrExit();
const cutoffMs = Number(process.env.COMPACT_CUTOFF_MS ?? Date.now());
const batch = Number(process.env.COMPACT_BATCH ?? 10_000);
const client = await openClient(config.DATABASE_URL, config);
const db = createDatabase(client);
let last = Date.now();
console.log(JSON.stringify({ step: 'start', at: last }));
const result = await compactOutbox(
  { db, writer: createWriter(db), clock: () => new Date() },
  {
    cutoffMs,
    batch,
    onBatch: (p) => {
      const now = Date.now();
      console.log(JSON.stringify({ step: 'batch', at: now, batches: p.batches, deleted: p.deleted, batchMs: now - last }));
      last = now;
    },
  },
);
console.log(JSON.stringify({ step: 'done', at: Date.now(), ...result }));
client.close();
