import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { histogramQuantile } from '../../src/ops/histogram-quantile.ts';
import { recordRecentLogs } from '../../src/recent-logs.ts';

describe('status page numbers - lag percentiles from histogram buckets', () => {
  const lagOf = (values: number[]) => {
    const h = createMetrics().histogram('lag_seconds', 'test', [0.01, 0.1, 1]);
    values.forEach((v) => h.observe(v));
    return h.snapshot();
  };

  it('interpolates inside the bucket the rank falls in, as Prometheus does', () => {
    // 10 observations: 4 up to 0.01 s, 4 in (0.01, 0.1], 2 in (0.1, 1]
    const h = lagOf([0.005, 0.005, 0.005, 0.005, 0.05, 0.05, 0.05, 0.05, 0.5, 0.5]);
    expect(histogramQuantile(0.2, h)).toEqual({ value: 0.005, above: false });
    expect(histogramQuantile(0.5, h)!.value).toBeCloseTo(0.0325);
    expect(histogramQuantile(0.9, h)!.value).toBeCloseTo(0.55);
  });

  it('reports the last finite bound as a floor when the rank lies past it, and nothing before any observation', () => {
    expect(histogramQuantile(0.99, lagOf([0.005, 5, 5]))).toEqual({ value: 1, above: true });
    expect(histogramQuantile(0.5, lagOf([]))).toBeUndefined();
  });
});

describe('status page numbers - recent warnings and errors', () => {
  it('keeps the last warn and error lines only, bounded, without stacks, and still logs every line', () => {
    const written: string[] = [];
    const inner = { ...silentLogger, warn: (m: string) => void written.push(m), error: (m: string) => void written.push(m) };
    const { log, recent } = recordRecentLogs(inner, { capacity: 2, clock: () => new Date(0) });
    log.info('ignored');
    log.warn('first');
    log.error('second', { error: 'boom', stack: 'at x', detail: 'x'.repeat(600) });
    log.warn('third', { attempts: 3 });
    expect(written).toEqual(['first', 'second', 'third']);
    const kept = recent.list();
    expect(kept.map((e) => [e.level, e.msg])).toEqual([
      ['error', 'second'],
      ['warn', 'third'],
    ]);
    expect(Object.keys(kept[0]!.fields)).toEqual(['error', 'detail']);
    expect(kept[0]!.fields.detail!.length).toBe(501);
    expect(kept[1]!.fields).toEqual({ attempts: '3' });
  });
});
