CREATE TABLE `idempotency_keys` (
	`key` text PRIMARY KEY NOT NULL,
	`fingerprint` text NOT NULL,
	`status_code` integer NOT NULL,
	`response_body` text NOT NULL,
	`location` text,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `order_lines` (
	`order_id` text NOT NULL,
	`line_no` integer NOT NULL,
	`sku` text NOT NULL,
	`quantity` integer NOT NULL,
	`unit_price_cents` integer NOT NULL,
	PRIMARY KEY(`order_id`, `line_no`),
	FOREIGN KEY (`order_id`) REFERENCES `orders`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE TABLE `orders` (
	`id` text PRIMARY KEY NOT NULL,
	`customer_id` text NOT NULL,
	`currency` text NOT NULL,
	`status` text NOT NULL,
	`total_cents` integer NOT NULL,
	`version` integer NOT NULL,
	`placed_at` integer NOT NULL,
	`cancelled_at` integer,
	`cancel_reason` text,
	CONSTRAINT "orders_status_check" CHECK("orders"."status" IN ('placed','cancelled'))
);
--> statement-breakpoint
CREATE INDEX `idx_orders_customer` ON `orders` (`customer_id`);--> statement-breakpoint
CREATE TABLE `outbox` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`aggregate_type` text NOT NULL,
	`aggregate_id` text NOT NULL,
	`message_type` text NOT NULL,
	`payload` text NOT NULL,
	`headers` text DEFAULT '{}' NOT NULL,
	`status` text NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`last_error` text,
	`occurred_at` integer NOT NULL,
	`available_at` integer NOT NULL,
	`sent_at` integer,
	CONSTRAINT "outbox_status_check" CHECK("outbox"."status" IN ('pending','sent','failed'))
);
--> statement-breakpoint
CREATE UNIQUE INDEX `outbox_id_unique` ON `outbox` (`id`);--> statement-breakpoint
CREATE INDEX `idx_outbox_status_seq` ON `outbox` (`status`,`seq`);--> statement-breakpoint
CREATE INDEX `idx_outbox_retrying` ON `outbox` (`aggregate_type`,`aggregate_id`,`seq`) WHERE "outbox"."attempts" > 0 AND "outbox"."status" != 'sent';