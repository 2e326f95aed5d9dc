import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.ts';

describe('metrics: a series bound once', () => {
  it('counts into the same series as inc with the same labels, whatever their order', async () => {
    const m = createMetrics();
    const c = m.counter('jobs_total', 'Jobs.');
    const bound = c.series({ queue: 'a', kind: 'x' });
    bound.inc();
    bound.inc(4);
    c.inc({ kind: 'x', queue: 'a' });
    expect(c.get({ queue: 'a', kind: 'x' })).toBe(6);
    expect((await m.render()).split('\n').filter((l) => l.startsWith('jobs_total'))).toEqual(['jobs_total{kind="x",queue="a"} 6']);
  });

  it('observes into the same histogram series as observe with the same labels', async () => {
    const m = createMetrics();
    const h = m.histogram('job_seconds', 'Job time.', [0.1, 1], { labelled: true });
    expect(await m.render()).not.toContain('job_seconds_count');
    const bound = h.series({ queue: 'a' });
    bound.observe(0.05);
    bound.observe(0.5);
    h.observe(2, { queue: 'a' });
    expect(h.snapshot({ queue: 'a' })).toEqual({
      buckets: [
        { le: 0.1, count: 1 },
        { le: 1, count: 2 },
      ],
      count: 3,
      sum: 2.55,
    });
    const text = await m.render();
    expect(text).toContain('job_seconds_bucket{queue="a",le="+Inf"} 3');
    expect(text.match(/^job_seconds_count/gm)).toHaveLength(1);
  });
});
