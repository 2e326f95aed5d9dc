import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigSchema, parseConfig } from '../../src/config.ts';
import { ROOT } from '../support/process.ts';

type Line = { key: string; value: string; commented: boolean; line: number };

/** The `KEY=value` lines of .env.example, set or commented out (`# KEY=value`); prose comments are skipped. */
function readEnvExample(): Line[] {
  const text = readFileSync(join(ROOT, '.env.example'), 'utf8');
  return text.split('\n').flatMap((raw, i) => {
    const m = /^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$/.exec(raw.trim());
    return m ? [{ key: m[2]!, value: m[3]!, commented: m[1] !== undefined, line: i + 1 }] : [];
  });
}

const schemaKeys: string[] = Object.keys(ConfigSchema.shape);
const defaults: Record<string, unknown> = parseConfig({});
const lines = readEnvExample();

describe('.env.example - lists the configuration with its defaults', () => {
  it('names every variable of ConfigSchema exactly once, and nothing else', () => {
    const listed = lines.map((l) => l.key);
    const missing = schemaKeys.filter((k) => !listed.includes(k));
    const unknown = listed.filter((k) => !schemaKeys.includes(k));
    const twice = listed.filter((k, i) => listed.indexOf(k) !== i);
    expect({ missing, unknown, twice }).toEqual({ missing: [], unknown: [], twice: [] });
  });

  it('sets each variable that has a default to that default, and comments out those without one', () => {
    for (const l of lines) {
      const where = `.env.example:${l.line} ${l.key}=${l.value}`;
      if (defaults[l.key] === undefined) {
        expect(l.commented, `${where} has no default in ConfigSchema: comment it out`).toBe(true);
        continue;
      }
      // derived defaults (NATS_STREAM, EVENTS_SUBJECT_PREFIX) are listed commented, with the derived value
      const parsed: Record<string, unknown> = parseConfig({ [l.key]: l.value });
      expect(parsed[l.key], where).toEqual(defaults[l.key]);
    }
  });

  it('changes nothing when copied to .env unedited', () => {
    const set = Object.fromEntries(lines.filter((l) => !l.commented).map((l) => [l.key, l.value]));
    expect(parseConfig(set)).toEqual(defaults);
  });
});
