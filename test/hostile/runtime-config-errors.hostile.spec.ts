// Configuration the schema lets through but the database driver cannot use: every runtime's production entry must
// refuse it as it refuses any bad variable (one line naming it, exit code 2), not crash with a driver stack trace.
import { describe, expect, it } from 'vitest';
import { RUNTIMES, runToExit, runtimeCommand, type Runtime } from '../support/process.ts';

describe.each(RUNTIMES)('runtime %s - a DATABASE_URL the driver cannot parse', (runtime: Runtime) => {
  it.each([
    ['a libsql URL with one slash', 'libsql:/db.example.com'],
    ['a libsql URL with an unknown tls value', 'libsql://db.example.com?tls=maybe'],
    ['a file URL with a host (file://data/app.db)', 'file://data/app.db'],
    ['a file URL with a port (file://localhost:8080/tmp/app.db)', 'file://localhost:8080/tmp/app.db'],
    ['a file URL with userinfo (file://u:p@localhost/tmp/app.db)', 'file://u:p@localhost/tmp/app.db'],
    ['an http URL opting into TLS (http://db.example.com:8080?tls=1)', 'http://db.example.com:8080?tls=1'],
  ])('%s exits 2 with one line naming DATABASE_URL', async (_label, url) => {
    const { cmd, args } = runtimeCommand(runtime, `src/entry/${runtime}.ts`);
    const res = await runToExit(cmd, args, { DATABASE_URL: url, ROLES: 'api', PORT: '0', HOST: '127.0.0.1', NO_COLOR: '1' }, 30_000);
    expect(res.code, res.stderr).toBe(2);
    const lines = res.stderr.trim().split('\n');
    expect(lines, res.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/DATABASE_URL/);
  });
});
