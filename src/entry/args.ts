// Command-line parsing shared by the relay, consumer and CLI entries.

/** A bad command line: the entry prints the message and the usage, then exits 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** Parses `--name value` and `--flag` pairs; positional words are returned in order. */
export function parseArgs(argv: string[], known: { values: string[]; flags?: string[] }): { positional: string[]; values: Record<string, string>; flags: Set<string> } {
  const values: Record<string, string> = {};
  const flags = new Set<string>();
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const [name, inline] = arg.slice(2).split(/=(.*)/s, 2) as [string, string | undefined];
    if (known.flags?.includes(name)) {
      flags.add(name);
    } else if (known.values.includes(name)) {
      const value = inline ?? argv[++i];
      if (value === undefined || value.startsWith('--')) throw new UsageError(`--${name} needs a value`);
      values[name] = value;
    } else {
      throw new UsageError(`unknown option --${arg.slice(2)}`);
    }
  }
  return { positional, values, flags };
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Parses a duration such as `500ms`, `30s`, `15m`, `2h` or `7d` into milliseconds. */
export function parseDuration(text: string, option: string): number {
  const m = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim());
  if (!m) throw new UsageError(`--${option} must be a duration such as 30s, 15m, 2h or 7d (got ${JSON.stringify(text)})`);
  return Number(m[1]) * UNITS[m[2]!]!;
}

/** Parses a positive integer option. */
export function parsePositiveInt(text: string, option: string): number {
  if (!/^\d+$/.test(text) || Number(text) < 1 || !Number.isSafeInteger(Number(text))) {
    throw new UsageError(`--${option} must be a positive integer (got ${JSON.stringify(text)})`);
  }
  return Number(text);
}
