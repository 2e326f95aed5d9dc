-- Marks that do not rewrite the outbox row. Setting status and sent_at on an outbox row makes SQLite write the whole
-- row again, payload and overflow pages included, so marking a backlog of large events cost the relay more than
-- publishing them. While it drains a backlog the relay records each published row here instead (its seq and its id);
-- a pending row with an entry of the same seq and id counts as sent, and the relay folds the entries into the outbox
-- once it has caught up. An entry whose row was replaced by another event under the same seq no longer matches it.
CREATE TABLE `outbox_sent` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`sent_at` integer NOT NULL
);
--> statement-breakpoint
-- A status written by anyone but the fold (a script putting a sent row back to pending to publish it again, parking
-- it by hand) drops the row's entry, so the write means what it means on a row marked the usual way.
CREATE TRIGGER `outbox_sent_mark_dropped` AFTER UPDATE OF `status` ON `outbox`
WHEN NEW.`status` != 'sent'
BEGIN
  DELETE FROM `outbox_sent` WHERE `seq` = NEW.`seq`;
END;
--> statement-breakpoint
-- A row given another seq (an UPDATE of seq or of rowid, its alias) takes its entry along. The trigger names no column:
-- `UPDATE OF seq` would not fire for `SET rowid = …`; every other UPDATE evaluates its WHEN and stops there.
CREATE TRIGGER `outbox_sent_mark_moved` AFTER UPDATE ON `outbox`
WHEN NEW.`seq` IS NOT OLD.`seq`
BEGIN
  UPDATE OR REPLACE `outbox_sent` SET `seq` = NEW.`seq` WHERE `seq` = OLD.`seq`;
END;
