import { describe, expect, it } from 'vitest';
import { logShownOnFailure } from '../support/torture-log.ts';
import { DELIVERY_BUDGET_MS, formatReport, runTorture, violationCount } from '../../torture/run.ts';

describe('torture - crash injection with a ledger check', () => {
  it('a seeded run with kills of every process kind, a broker restart, a pause, a backlog with a poison row queued while the broker is down, and a subscriber database locked past its delivery budget loses, duplicates and reorders nothing', async () => {
    const result = await runTorture({
      seed: 7,
      commands: 500,
      kills: 6,
      brokerRestarts: 1,
      pauses: 1,
      rate: 40,
      concurrency: 8,
      backlog: 3000,
      lockSubscriberMs: DELIVERY_BUDGET_MS + 3000,
      log: logShownOnFailure(),
    });
    const report = formatReport(result);
    console.log(report);
    expect(result.injected['broker restart']).toBe(1);
    expect(result.injected.pause).toBe(1);
    expect(
      Object.entries(result.injected)
        .filter(([k]) => k.startsWith('kill'))
        .reduce((n, [, v]) => n + v, 0),
    ).toBe(6);
    expect(result.counts.acknowledged).toBeGreaterThan(3000);
    expect(violationCount(result), report).toBe(0);
  }, 240_000);

  it('the checker reports duplicated effects for subscribers running without the inbox', async () => {
    const result = await runTorture({
      seed: 11,
      commands: 150,
      kills: 0,
      brokerRestarts: 0,
      pauses: 0,
      rate: 60,
      concurrency: 4,
      broken: 'no-inbox',
      log: logShownOnFailure(),
    });
    expect(result.counts.duplicatedEffects, formatReport(result)).toBeGreaterThan(0);
  }, 180_000);

  it('the checker reports lost events for a relay that marks rows sent before publishing them', async () => {
    const result = await runTorture({
      seed: 13,
      commands: 150,
      kills: 0,
      brokerRestarts: 0,
      pauses: 0,
      rate: 60,
      concurrency: 4,
      broken: 'mark-before-puback',
      log: logShownOnFailure(),
    });
    expect(result.counts.lost, formatReport(result)).toBeGreaterThan(0);
  }, 180_000);
});
