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
CREATE TABLE `notification_emails` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`order_id` text NOT NULL,
	`customer_id` text NOT NULL,
	`kind` text NOT NULL,
	`created_at` integer NOT NULL
);
