// Hostile cases: lines logged at level error carry the error's stack (the logger's promise), also where the
// error is not an HTTP one — a subscriber write that fails because of a bug.
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.ts';
import { openedEvent } from '../support/accounts.ts';
import { createSubscriberDb, testRunner } from '../support/consumer.ts';
import { audit } from '../support/fixture/subscribers/audit/subscriber.ts';
import { freshStream, publishEvents } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('logs - error lines carry a stack', () => {
  it("a subscriber write failing with a bug (TypeError) is logged at error with the error's type and stack", async () => {
    await using sdb = await createSubscriberDb();
    const stream = await freshStream(nats().nc, 'ERRLOG');
    await publishEvents(nats().nc, stream, [openedEvent()]);
    const lines: Array<Record<string, unknown>> = [];
    const log = createLogger('debug', (l) => lines.push(JSON.parse(l) as Record<string, unknown>), { service: 'test', version: '1' });
    let calls = 0;
    const runner = testRunner(sdb, nats().url, audit, stream, {
      log,
      processBatch: async (msgs) => {
        calls++;
        if (calls === 1) (undefined as unknown as { x: () => void }).x();
        return msgs.map((m) => ({ outcome: 'processed' as const, eventId: m.fallbackId }));
      },
    });
    await runner.run({ maxMessages: 1, timeLimitMs: 10_000 });
    const errorLines = lines.filter((l) => l.level === 'error');
    expect(errorLines.length).toBeGreaterThan(0);
    for (const l of errorLines) {
      expect(JSON.stringify(l.error), `error line without a stack: ${JSON.stringify(l)}`).toMatch(/TypeError[\s\S]*at /);
    }
  });
});
