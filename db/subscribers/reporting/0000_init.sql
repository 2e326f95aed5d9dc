CREATE TABLE `dead_letters` (
	`event_id` text NOT NULL,
	`consumer` text NOT NULL,
	`subject` text NOT NULL,
	`headers` text DEFAULT '{}' NOT NULL,
	`payload` text NOT NULL,
	`error` text NOT NULL,
	`deliveries` integer NOT NULL,
	`dead_at` integer NOT NULL,
	PRIMARY KEY(`event_id`, `consumer`)
);
--> statement-breakpoint
CREATE TABLE `inbox` (
	`event_id` text NOT NULL,
	`consumer` text NOT NULL,
	`message_type` text NOT NULL,
	`received_at` integer NOT NULL,
	PRIMARY KEY(`event_id`, `consumer`)
);
--> statement-breakpoint
CREATE INDEX `idx_inbox_received_at` ON `inbox` (`received_at`);--> statement-breakpoint
CREATE TABLE `customer_reports` (
	`customer_id` text PRIMARY KEY NOT NULL,
	`orders_placed` integer DEFAULT 0 NOT NULL,
	`orders_cancelled` integer DEFAULT 0 NOT NULL,
	`total_cents` integer DEFAULT 0 NOT NULL
);
