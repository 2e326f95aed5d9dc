-- Rows that did not come from appendToOutbox (a script, a restore, another release) get their partition from the
-- relay: their aggregate_hash is cleared, and the relay's next pass hashes them, reads from the oldest pending row
-- again and holds back the later rows of their aggregate until it has (src/outbox/outbox-partitions.ts). That covers
-- an unmarked row, a row stored at or below the highest seq ever given (a relay's floor may already be there), and a
-- row whose partition is not its hash under the current count (it would sit where no relay reads, or in another
-- relay's partition than its aggregate's other rows).
CREATE TRIGGER `outbox_row_placed` AFTER INSERT ON `outbox`
WHEN NEW.`aggregate_hash` IS NOT NULL AND NEW.`status` != 'sent' AND (
  NEW.`payload_validated` IS NOT 1
  OR NEW.`seq` <= (SELECT `seq` FROM `sqlite_sequence` WHERE `name` = 'outbox')
  OR NEW.`partition` IS NOT NEW.`aggregate_hash` % (SELECT `count` FROM `outbox_partitions` WHERE `id` = 1))
BEGIN
  UPDATE `outbox` SET `aggregate_hash` = NULL WHERE `seq` = NEW.`seq`;
END;
--> statement-breakpoint
-- The same for an unsent row moved to another aggregate or partition by an UPDATE. The relay's own writes keep
-- partition = aggregate_hash % count and never change the aggregate, so they never fire it.
CREATE TRIGGER `outbox_row_moved` AFTER UPDATE OF `aggregate_type`, `aggregate_id`, `partition` ON `outbox`
WHEN NEW.`aggregate_hash` IS NOT NULL AND NEW.`status` != 'sent' AND (
  NEW.`aggregate_type` IS NOT OLD.`aggregate_type`
  OR NEW.`aggregate_id` IS NOT OLD.`aggregate_id`
  OR NEW.`partition` IS NOT NEW.`aggregate_hash` % (SELECT `count` FROM `outbox_partitions` WHERE `id` = 1))
BEGIN
  UPDATE `outbox` SET `aggregate_hash` = NULL WHERE `seq` = NEW.`seq`;
END;
