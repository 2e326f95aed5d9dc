-- Rows a script, a restore or an operator wrote or edited by hand, made safe for the relay.
--
-- "The highest seq ever given" is sqlite_sequence's row for the outbox (AUTOINCREMENT). A fresh database gets that row
-- only with its first outbox row, and a repair script or a copy can lose it: it is created here, and a trigger that
-- finds none (deleted since) cannot tell a restored row from a new one, so it takes every row for a restored one.
INSERT INTO sqlite_sequence (name, seq)
SELECT 'outbox', coalesce((SELECT max(seq) FROM outbox), 0)
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'outbox');
--> statement-breakpoint
-- A row stored again under a seq already given (REPLACE INTO, or a repair script's DELETE and INSERT) was not written
-- by appendToOutbox, which always takes a new seq above the highest given: the payload_validated mark it copied with
-- the other columns is cleared, so the relay parses and validates its payload in full (outbox_payload_edited, an
-- UPDATE trigger, never sees a REPLACE).
CREATE TRIGGER `outbox_row_restored_unmarked` AFTER INSERT ON `outbox`
WHEN NEW.`payload_validated` != 0 AND NEW.`seq` <= coalesce((SELECT `seq` FROM `sqlite_sequence` WHERE `name` = 'outbox'), NEW.`seq`)
BEGIN
  UPDATE `outbox` SET `payload_validated` = 0 WHERE `seq` = NEW.`seq`;
END;
--> statement-breakpoint
-- outbox_row_placed (0007) again, with the same fallback: a row stored while sqlite_sequence has no outbox row is
-- placed by the relay.
DROP TRIGGER IF EXISTS `outbox_row_placed`;
--> statement-breakpoint
CREATE TRIGGER `outbox_row_placed` AFTER INSERT ON `outbox`
WHEN NEW.`aggregate_hash` IS NOT NULL AND NEW.`status` != 'sent' AND (
  NEW.`payload_validated` IS NOT 1
  OR NEW.`seq` <= coalesce((SELECT `seq` FROM `sqlite_sequence` WHERE `name` = 'outbox'), NEW.`seq`)
  OR NEW.`partition` IS NOT NEW.`aggregate_hash` % (SELECT `count` FROM `outbox_partitions` WHERE `id` = 1))
BEGIN
  UPDATE `outbox` SET `aggregate_hash` = NULL WHERE `seq` = NEW.`seq`;
END;
--> statement-breakpoint
-- A row parked by hand (status 'failed' with no attempt counted) counts one attempt, as every row the relay parks
-- does: the hold-back check (idx_outbox_retrying) then keeps the later rows of its aggregate behind it, and once
-- re-queued it is a due retry (idx_outbox_retry_due), read by the relay's next pass whatever its floor.
CREATE TRIGGER `outbox_parked_counted` AFTER UPDATE OF `status`, `attempts` ON `outbox`
WHEN NEW.`status` = 'failed' AND NOT (NEW.`attempts` > 0)
BEGIN
  UPDATE `outbox` SET `attempts` = 1 WHERE `seq` = NEW.`seq`;
END;
--> statement-breakpoint
CREATE TRIGGER `outbox_parked_counted_on_insert` AFTER INSERT ON `outbox`
WHEN NEW.`status` = 'failed' AND NOT (NEW.`attempts` > 0)
BEGIN
  UPDATE `outbox` SET `attempts` = 1 WHERE `seq` = NEW.`seq`;
END;
--> statement-breakpoint
-- available_at is a time in ms. A value that is no number (a date text such as datetime('now'), which the INTEGER
-- column keeps as text and SQLite sorts above every number) or no time (beyond the range of a JavaScript Date) would
-- never come due: the row would stay pending, never parked, and hold its aggregate's later rows for good. Such a value
-- means "due now" (0). (The range is compared as it is: abs() fails on the smallest 64-bit integer.)
CREATE TRIGGER `outbox_due_time_checked` AFTER UPDATE OF `available_at` ON `outbox`
WHEN typeof(NEW.`available_at`) NOT IN ('integer', 'real') OR NEW.`available_at` NOT BETWEEN -8640000000000000 AND 8640000000000000
BEGIN
  UPDATE `outbox` SET `available_at` = 0 WHERE `seq` = NEW.`seq`;
END;
--> statement-breakpoint
CREATE TRIGGER `outbox_due_time_checked_on_insert` AFTER INSERT ON `outbox`
WHEN typeof(NEW.`available_at`) NOT IN ('integer', 'real') OR NEW.`available_at` NOT BETWEEN -8640000000000000 AND 8640000000000000
BEGIN
  UPDATE `outbox` SET `available_at` = 0 WHERE `seq` = NEW.`seq`;
END;
--> statement-breakpoint
-- Rows stored before these triggers.
UPDATE `outbox` SET `available_at` = 0 WHERE typeof(`available_at`) NOT IN ('integer', 'real') OR `available_at` NOT BETWEEN -8640000000000000 AND 8640000000000000;
--> statement-breakpoint
UPDATE `outbox` SET `attempts` = 1 WHERE `status` = 'failed' AND NOT (`attempts` > 0);
