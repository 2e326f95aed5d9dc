CREATE TABLE `outbox_relay_epoch` (
	`id` integer PRIMARY KEY NOT NULL,
	`retries_sent` integer DEFAULT 0 NOT NULL
);
