// Durations as configuration and the CLI write them: `500ms`, `30s`, `15m`, `2h`, `7d`.

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** The longest duration anything accepts (ten years): `now - duration` stays a valid date and a safe integer. */
export const MAX_DURATION_MS = 3650 * UNITS.d!;

/** Milliseconds of a duration such as `500ms`, `30s`, `15m`, `2h` or `7d`; undefined for any other text or beyond MAX_DURATION_MS. */
export function parseDuration(text: string): number | undefined {
  const m = /^(\d{1,16})(ms|s|m|h|d)$/.exec(text.trim());
  if (!m) return undefined;
  const ms = Number(m[1]) * UNITS[m[2]!]!;
  return ms <= MAX_DURATION_MS ? ms : undefined;
}

/** The shortest exact spelling of `ms` (`86400000` → `1d`, `90000` → `90s`), for messages that echo a duration back. */
export function formatDuration(ms: number): string {
  for (const unit of ['d', 'h', 'm', 's'] as const) if (ms !== 0 && ms % UNITS[unit]! === 0) return `${ms / UNITS[unit]!}${unit}`;
  return `${ms}ms`;
}
