CREATE TABLE `outbox_partitions` (
	`id` integer PRIMARY KEY NOT NULL,
	`count` integer NOT NULL,
	CONSTRAINT "outbox_partitions_count_check" CHECK("outbox_partitions"."count" BETWEEN 1 AND 1024)
);
--> statement-breakpoint
-- 16 until a relay applies OUTBOX_PARTITIONS; rows stored before this migration get their partition from the relay.
INSERT OR IGNORE INTO `outbox_partitions` (`id`, `count`) VALUES (1, 16);
--> statement-breakpoint
CREATE TABLE `lease_members` (
	`scope` text NOT NULL,
	`owner` text NOT NULL,
	`expires_at` integer NOT NULL,
	`joined_at` integer NOT NULL,
	PRIMARY KEY(`scope`, `owner`)
);
--> statement-breakpoint
CREATE TABLE `leases` (
	`scope` text NOT NULL,
	`partition` integer NOT NULL,
	`owner` text,
	`epoch` integer DEFAULT 0 NOT NULL,
	`expires_at` integer DEFAULT 0 NOT NULL,
	PRIMARY KEY(`scope`, `partition`)
);
--> statement-breakpoint
DROP INDEX `idx_outbox_status_seq`;--> statement-breakpoint
ALTER TABLE `outbox` ADD `aggregate_hash` integer;--> statement-breakpoint
ALTER TABLE `outbox` ADD `partition` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX `idx_outbox_unhashed` ON `outbox` (`aggregate_type`,`aggregate_id`,`seq`) WHERE "outbox"."aggregate_hash" IS NULL AND "outbox"."status" != 'sent';--> statement-breakpoint
CREATE INDEX `idx_outbox_status_seq` ON `outbox` (`status`,`seq`,`partition`);