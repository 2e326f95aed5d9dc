import type { HistogramSnapshot } from '../metrics/metrics.ts';

/** A quantile read from buckets; `above` when it lies past the last finite bound (then `value` is that bound). */
export type Quantile = { value: number; above: boolean };

/**
 * The `q`-quantile (0 < q < 1) of a cumulative histogram, the way Prometheus' histogram_quantile estimates it:
 * linear interpolation inside the bucket the rank falls in (from 0 for the first bucket). Undefined when nothing
 * was observed. Its error is at most that bucket's width.
 */
export function histogramQuantile(q: number, h: HistogramSnapshot): Quantile | undefined {
  if (h.count === 0) return undefined;
  const rank = q * h.count;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const { le, count } of h.buckets) {
    if (count >= rank) {
      const inBucket = count - lowerCount;
      const value = inBucket === 0 ? le : lowerBound + ((le - lowerBound) * (rank - lowerCount)) / inBucket;
      return { value, above: false };
    }
    lowerBound = le;
    lowerCount = count;
  }
  return { value: lowerBound, above: true };
}
