-- The relay's floor (src/outbox/relay-store.ts) stays valid only while no retried or re-queued row became sent:
-- count those, whichever process marks them.
INSERT OR IGNORE INTO `outbox_relay_epoch` (`id`, `retries_sent`) VALUES (1, 0);
--> statement-breakpoint
CREATE TRIGGER `outbox_retry_sent` AFTER UPDATE OF `status` ON `outbox`
WHEN OLD.`attempts` > 0 AND OLD.`status` != 'sent' AND NEW.`status` = 'sent'
BEGIN
  UPDATE `outbox_relay_epoch` SET `retries_sent` = `retries_sent` + 1 WHERE `id` = 1;
END;
