-- The relay reads the text columns of a payload_validated row as appendToOutbox wrote them, and only those of other
-- rows through a check for bytes that are no UTF-8 (which the driver cannot read: it aborts the process). The headers
-- column joins the columns whose change, by whatever process, unmarks the row (outbox_payload_edited, 0006). The
-- relay's own writes still never set any of them.
DROP TRIGGER IF EXISTS `outbox_payload_edited`;
--> statement-breakpoint
CREATE TRIGGER `outbox_payload_edited` AFTER UPDATE OF `id`, `aggregate_type`, `aggregate_id`, `message_type`, `occurred_at`, `payload`, `headers` ON `outbox`
WHEN NEW.`payload_validated` != 0
BEGIN
  UPDATE `outbox` SET `payload_validated` = 0 WHERE `seq` = NEW.`seq`;
END;
--> statement-breakpoint
-- Unsent rows whose headers are not the printable ASCII appendToOutbox writes were edited before this trigger: unmarked.
UPDATE `outbox` SET `payload_validated` = 0
WHERE `payload_validated` != 0 AND `status` != 'sent' AND (typeof(`headers`) != 'text' OR `headers` GLOB '*[^ -~]*' OR instr(`headers`, char(0)) > 0);
