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
