// The relay trusts a row's payload past its envelope while the row keeps payload_validated = 1, and only the trigger
// outbox_payload_edited takes the mark away when the payload is edited. Triggers are not part of the drizzle schema:
// when a later migration makes drizzle-kit rebuild `outbox` (CREATE __new_outbox, INSERT … SELECT with every column,
// DROP TABLE outbox, rename — what it generates for a new CHECK, a changed NOT NULL or type), the DROP takes the
// trigger with it and the copy keeps every mark. migrateDatabase creates such triggers again; without that, an edit of
// a marked row's data would keep the mark and the relay would publish an event no subscriber accepts.
import { describe, expect, it } from 'vitest';
import { accountCommands } from '../support/accounts.ts';
import { createTempDir, createTestDb } from '../support/db.ts';
import { migrationsFolder } from '../support/migrations-folder.ts';
import { drainOutbox, relayDeps } from '../support/relay.ts';
import { ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/**
 * What `drizzle-kit generate` (0.31) writes when a CHECK is added to the outbox table (here `payload_validated IN (0, 1)`),
 * as generated from src/outbox/tables.ts in a copy of this repository, statement for statement.
 */
const REBUILD = `PRAGMA foreign_keys=OFF;--> statement-breakpoint
CREATE TABLE \`__new_outbox\` (
	\`seq\` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	\`id\` text NOT NULL,
	\`aggregate_type\` text NOT NULL,
	\`aggregate_id\` text NOT NULL,
	\`message_type\` text NOT NULL,
	\`payload\` text NOT NULL,
	\`headers\` text DEFAULT '{}' NOT NULL,
	\`status\` text NOT NULL,
	\`attempts\` integer DEFAULT 0 NOT NULL,
	\`last_error\` text,
	\`occurred_at\` integer NOT NULL,
	\`available_at\` integer NOT NULL,
	\`sent_at\` integer,
	\`aggregate_hash\` integer,
	\`partition\` integer DEFAULT 0 NOT NULL,
	\`payload_validated\` integer DEFAULT 0 NOT NULL,
	CONSTRAINT "outbox_status_check" CHECK("__new_outbox"."status" IN ('pending','sent','failed')),
	CONSTRAINT "outbox_payload_validated_check" CHECK("__new_outbox"."payload_validated" IN (0, 1))
);
--> statement-breakpoint
INSERT INTO \`__new_outbox\`("seq", "id", "aggregate_type", "aggregate_id", "message_type", "payload", "headers", "status", "attempts", "last_error", "occurred_at", "available_at", "sent_at", "aggregate_hash", "partition", "payload_validated") SELECT "seq", "id", "aggregate_type", "aggregate_id", "message_type", "payload", "headers", "status", "attempts", "last_error", "occurred_at", "available_at", "sent_at", "aggregate_hash", "partition", "payload_validated" FROM \`outbox\`;--> statement-breakpoint
DROP TABLE \`outbox\`;--> statement-breakpoint
ALTER TABLE \`__new_outbox\` RENAME TO \`outbox\`;--> statement-breakpoint
PRAGMA foreign_keys=ON;--> statement-breakpoint
CREATE UNIQUE INDEX \`outbox_id_unique\` ON \`outbox\` (\`id\`);--> statement-breakpoint
CREATE INDEX \`idx_outbox_status_seq\` ON \`outbox\` (\`status\`,\`seq\`,\`partition\`);--> statement-breakpoint
CREATE INDEX \`idx_outbox_retrying\` ON \`outbox\` (\`aggregate_type\`,\`aggregate_id\`,\`seq\`) WHERE "outbox"."attempts" > 0 AND "outbox"."status" != 'sent';--> statement-breakpoint
CREATE INDEX \`idx_outbox_retry_due\` ON \`outbox\` (\`available_at\`) WHERE "outbox"."attempts" > 0 AND "outbox"."status" = 'pending';--> statement-breakpoint
CREATE INDEX \`idx_outbox_unhashed\` ON \`outbox\` (\`aggregate_type\`,\`aggregate_id\`,\`seq\`) WHERE "outbox"."aggregate_hash" IS NULL AND "outbox"."status" != 'sent';`;

describe('relay row check - the mark survives only as long as what clears it', () => {
  // a drizzle-kit rebuild of the outbox (a later, ordinary migration), then an operator's data fix on a pending row
  it('after a migration that rebuilds the outbox table, a marked row whose data was edited into an invalid event is not published', async () => {
    using tmp = createTempDir('outbox-rebuild-');
    await using t = await createTestDb({ migrations: migrationsFolder(tmp.dir, [['outbox_mark_check', REBUILD]]).folder });
    const stream = ownStream('REBUILT');
    await accountCommands(t.deps).open('ann');
    // an operator "fixes" the pending event's data by hand (here: drops data.owner, which the schema requires)
    await t.client.execute(`UPDATE outbox SET payload = json_remove(payload, '$.data.owner') WHERE seq = 1`);
    await drainOutbox(relayDeps(t, nats().url, { stream, settings: { maxAttempts: 1 } }));
    const published = await readStream(nats().nc, stream);
    // what a subscriber does with each message it receives (src/inbox/inbox-message.ts: registry.parse of the body)
    const refused = published.filter((m) => {
      try {
        t.deps.registry.parse(m.event);
        return false;
      } catch {
        return true;
      }
    });
    expect(refused.map((m) => m.event.data)).toEqual([]);
    const { rows } = await t.client.execute('SELECT status, payload_validated FROM outbox');
    expect(rows.map((r) => String(r.status))).toEqual(['failed']);
  });
});
