import { describe, expect, it } from 'vitest';
import { formatDuration, MAX_DURATION_MS, parseDuration } from '../../src/duration.ts';

describe('duration - parsing', () => {
  it('reads ms, s, m, h and d into milliseconds', () => {
    expect(['500ms', '30s', '15m', '2h', '7d', '0ms'].map(parseDuration)).toEqual([500, 30_000, 900_000, 7_200_000, 604_800_000, 0]);
  });

  it('refuses other spellings and anything beyond ten years, so a cutoff is always a valid date', () => {
    for (const text of ['', '7', '1w', '1.5h', '-1d', '1e3ms', '1 d', '99999999999999999d', '3651d', `${MAX_DURATION_MS + 1}ms`]) {
      expect(parseDuration(text), text).toBeUndefined();
    }
    expect(parseDuration('3650d')).toBe(MAX_DURATION_MS);
  });

  it('formats back to the shortest exact unit', () => {
    expect([86_400_000, 90_000, 1_200_000, 1500, 0].map(formatDuration)).toEqual(['1d', '90s', '20m', '1500ms', '0ms']);
  });
});
