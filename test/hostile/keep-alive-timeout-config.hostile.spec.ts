// HTTP_KEEP_ALIVE_TIMEOUT_MS written oddly: every form that is no plain integer in 1000–255000 is refused at start-up
// with one line naming the variable and exit code 2 (restarting will not help); an empty value means the default.
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.ts';
import { RUNTIMES, runToExit, runtimeCommand, type Runtime } from '../support/process.ts';

const ODD = [' 65000', '65000 ', '1e3', '65000.0', '-1000', '+65000', '0x3e8', '65_000', '65s', '999', '255001', '1'.repeat(400), '６５０００'];

describe('config - HTTP_KEEP_ALIVE_TIMEOUT_MS', () => {
  it.each(ODD)('refuses %j naming the variable', (value) => {
    expect(() => parseConfig({ HTTP_KEEP_ALIVE_TIMEOUT_MS: value })).toThrow(
      /^Invalid configuration: HTTP_KEEP_ALIVE_TIMEOUT_MS must be an integer between 1000 and 255000/,
    );
  });

  it('takes the bounds, leading zeros, and an empty value as the default', () => {
    expect(parseConfig({ HTTP_KEEP_ALIVE_TIMEOUT_MS: '1000' }).HTTP_KEEP_ALIVE_TIMEOUT_MS).toBe(1000);
    expect(parseConfig({ HTTP_KEEP_ALIVE_TIMEOUT_MS: '255000' }).HTTP_KEEP_ALIVE_TIMEOUT_MS).toBe(255_000);
    expect(parseConfig({ HTTP_KEEP_ALIVE_TIMEOUT_MS: '0065000' }).HTTP_KEEP_ALIVE_TIMEOUT_MS).toBe(65_000);
    expect(parseConfig({ HTTP_KEEP_ALIVE_TIMEOUT_MS: '' }).HTTP_KEEP_ALIVE_TIMEOUT_MS).toBe(65_000);
  });
});

describe.each(RUNTIMES)('runtime %s - an odd HTTP_KEEP_ALIVE_TIMEOUT_MS at start-up', (runtime: Runtime) => {
  it.each(['1e3', ' 65000', '-1'])('%j exits 2 with one line naming the variable', async (value) => {
    const { cmd, args } = runtimeCommand(runtime, `src/entry/${runtime}.ts`);
    const res = await runToExit(cmd, args, { HTTP_KEEP_ALIVE_TIMEOUT_MS: value, ROLES: 'api', PORT: '0', HOST: '127.0.0.1' }, 30_000);
    expect(res.code, res.stderr).toBe(2);
    const lines = res.stderr.trim().split('\n');
    expect(lines, res.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/HTTP_KEEP_ALIVE_TIMEOUT_MS/);
  });
});
