-- 1 marks a row appendToOutbox validated and serialized itself: the relay then checks only its payload's envelope
-- prefix against the columns (src/outbox/row-message.ts). Rows already stored get 0 and are checked in full.
ALTER TABLE `outbox` ADD `payload_validated` integer DEFAULT 0 NOT NULL;
--> statement-breakpoint
-- A change to the payload or to a column that check compares, by whatever process, unmarks the row. UPDATE OF fires
-- only for statements that set one of these columns, so the relay's own writes (status, attempts, available_at,
-- last_error, sent_at, aggregate_hash, partition) never run it.
CREATE TRIGGER `outbox_payload_edited` AFTER UPDATE OF `id`, `aggregate_type`, `aggregate_id`, `message_type`, `occurred_at`, `payload` ON `outbox`
WHEN NEW.`payload_validated` != 0
BEGIN
  UPDATE `outbox` SET `payload_validated` = 0 WHERE `seq` = NEW.`seq`;
END;
