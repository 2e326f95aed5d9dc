import { createClient, type Client } from '@libsql/client';
import { join } from 'node:path';
import { afterEach } from 'vitest';
import { createTempDir } from './db.ts';
import { runtimeCommand, runToExit } from './process.ts';

/**
 * Returns a factory of CLI workspaces for the calling test file: each a temp dir with the service and subscriber
 * database URLs in `env`, `cli(args)` running `src/entry/cli.ts` there, and `open(url)` for clients to inspect the
 * files; all closed and removed after each test.
 */
export function useCliWorkspaces() {
  const cleanups: Array<() => unknown> = [];
  afterEach(() => {
    while (cleanups.length) cleanups.pop()!();
  });
  return () => {
    const tmp = createTempDir();
    const env = {
      DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
      CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
      LOG_LEVEL: 'error',
    };
    const clients: Client[] = [];
    const open = (url: string) => {
      const c = createClient({ url });
      clients.push(c);
      return c;
    };
    cleanups.push(() => {
      clients.forEach((c) => c.close());
      tmp[Symbol.dispose]();
    });
    const cli = (args: string[], extra: Record<string, string> = {}) => {
      const { cmd, args: base } = runtimeCommand('node', 'src/entry/cli.ts');
      return runToExit(cmd, [...base, ...args], { ...env, ...extra });
    };
    return { env, cli, open };
  };
}
