-- The relay addresses rows by seq as JavaScript numbers, and the driver refuses an integer past 2^53 − 1 as a number:
-- one row there would fail every fetch of the relay, and move the AUTOINCREMENT counter past it for every later row.
-- The relay reads rows above seq 0 only, so a row at 0 or below would never be published. A statement that would give
-- a row a seq outside 1 … 2^53 − 1 (a script's INSERT with its own seq, an UPDATE of seq or of rowid, its alias, a
-- counter set past it in sqlite_sequence) fails as a whole with this error instead. The INSERT check rides on
-- outbox_row_placed (0008), whose WHEN every insert evaluates anyway: another trigger would cost each command's
-- outbox row the setting up of one more trigger program. The UPDATE check names no column: `UPDATE OF seq` would
-- not fire for `SET rowid = …`.
DROP TRIGGER IF EXISTS `outbox_row_placed`;
--> statement-breakpoint
CREATE TRIGGER `outbox_row_placed` AFTER INSERT ON `outbox`
WHEN NEW.`seq` NOT BETWEEN 1 AND 9007199254740991 OR (NEW.`aggregate_hash` IS NOT NULL AND NEW.`status` != 'sent' AND (
  NEW.`payload_validated` IS NOT 1
  OR NEW.`seq` <= coalesce((SELECT `seq` FROM `sqlite_sequence` WHERE `name` = 'outbox'), NEW.`seq`)
  OR NEW.`partition` IS NOT NEW.`aggregate_hash` % (SELECT `count` FROM `outbox_partitions` WHERE `id` = 1)))
BEGIN
  SELECT RAISE(ABORT, 'outbox seq out of range: a seq must lie between 1 and 2^53 - 1, which the relay reads as a number') WHERE NEW.`seq` NOT BETWEEN 1 AND 9007199254740991;
  UPDATE `outbox` SET `aggregate_hash` = NULL WHERE `seq` = NEW.`seq`;
END;
--> statement-breakpoint
CREATE TRIGGER `outbox_seq_checked` AFTER UPDATE ON `outbox`
WHEN NEW.`seq` NOT BETWEEN 1 AND 9007199254740991
BEGIN
  SELECT RAISE(ABORT, 'outbox seq out of range: a seq must lie between 1 and 2^53 - 1, which the relay reads as a number');
END;
