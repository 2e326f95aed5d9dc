// Command-line parsing shared by the relay, consumer and CLI entries. Every mistake is a UsageError, raised before
// anything is opened, so a bad command line prints the usage, exits 2 and changes nothing.
import { formatDuration, MAX_DURATION_MS, parseDuration } from '../duration.ts';

/** A bad command line: the entry prints the message and the usage, then exits 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/**
 * Parses `--name value`, `--name=value` and `--flag`; throws UsageError for an unknown option, an option given
 * twice, a missing or empty value (`--name=`, `--name ''`), or more than `positional` (default 0) positional
 * words, which are returned in order.
 */
export function parseArgs(
  argv: string[],
  known: { values: string[]; flags?: string[]; positional?: number },
): { positional: string[]; values: Record<string, string>; flags: Set<string> } {
  const values: Record<string, string> = {};
  const flags = new Set<string>();
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) {
      if (positional.length >= (known.positional ?? 0)) throw new UsageError(`unexpected argument ${JSON.stringify(arg)}`);
      positional.push(arg);
      continue;
    }
    const [name, inline] = arg.slice(2).split(/=(.*)/s, 2) as [string, string | undefined];
    if (flags.has(name) || Object.hasOwn(values, name)) throw new UsageError(`--${name} given more than once`);
    if (known.flags?.includes(name)) {
      if (inline !== undefined) throw new UsageError(`--${name} takes no value`);
      flags.add(name);
    } else if (known.values.includes(name)) {
      const value = inline ?? argv[++i];
      if (value === undefined || value === '' || value.startsWith('--')) throw new UsageError(`--${name} needs a value`);
      values[name] = value;
    } else {
      throw new UsageError(`unknown option --${name}`);
    }
  }
  return { positional, values, flags };
}

/** Parses a duration option (`500ms`, `30s`, `15m`, `2h`, `7d`) into milliseconds, within [min, max]. */
export function parseDurationOption(text: string, option: string, range: { min?: number; max?: number } = {}): number {
  const min = range.min ?? 0;
  const max = range.max ?? MAX_DURATION_MS;
  const ms = parseDuration(text);
  if (ms === undefined || ms < min || ms > max) {
    throw new UsageError(
      `--${option} must be a duration between ${formatDuration(min)} and ${formatDuration(max)} such as 30s, 15m, 2h or 7d (got ${JSON.stringify(text)})`,
    );
  }
  return ms;
}

/** Parses an integer option between 1 and `max` (default: the largest safe integer). */
export function parsePositiveInt(text: string, option: string, max = Number.MAX_SAFE_INTEGER): number {
  if (!/^\d{1,16}$/.test(text) || Number(text) < 1 || Number(text) > max) {
    throw new UsageError(`--${option} must be an integer between 1 and ${max} (got ${JSON.stringify(text)})`);
  }
  return Number(text);
}
