// `npm run cli` with arguments that look given but are empty: a bad command line must print the usage, exit 2 and
// create or change nothing, as `--consumer=` already does.
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { useCliWorkspaces } from '../support/cli-workspace.ts';

const workspace = useCliWorkspaces();

describe('cli - empty option values', () => {
  it('an empty --id (outbox:retry-failed, inbox:replay) prints the usage and exits 2 without creating a database', async () => {
    const w = workspace();
    for (const args of [
      ['outbox:retry-failed', '--id='],
      ['outbox:retry-failed', '--id', ''],
      ['inbox:replay', '--consumer', 'reporting', '--id='],
    ]) {
      const res = await w.cli(args);
      const what = JSON.stringify(args);
      expect(res.code, `${what}\n${res.stdout}${res.stderr}`).toBe(2);
      expect(res.stderr, what).toContain('usage: npm run cli');
    }
    expect(existsSync(w.env.DATABASE_URL.slice('file:'.length))).toBe(false);
    expect(existsSync(w.env.CONSUMER_DATABASE_URL_TEMPLATE.replace('{name}', 'reporting').slice('file:'.length))).toBe(false);
  }, 60_000);
});
