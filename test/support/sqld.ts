// A private libSQL server (sqld) for tests that reach the database over a remote URL, as several hosts would.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, ROOT } from './process.ts';

/** The sqld binary: SQLD_BIN, or the one `node scripts/fetch-sqld.mjs` puts in node_modules/.cache/sqld. */
export const SQLD_BIN = process.env.SQLD_BIN ?? join(ROOT, 'node_modules/.cache/sqld/sqld');

/** Whether sqld can run here; without it the remote-database tests skip, except under CI where they must run. */
export const HAS_SQLD = existsSync(SQLD_BIN);

export type Sqld = { url: string; kill(): Promise<void>; [Symbol.asyncDispose](): Promise<void> };

/** Starts sqld on a free port with a temp database directory, answering libSQL's HTTP protocol at `url`. */
export async function startSqld(): Promise<Sqld> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'sqld-'));
  const proc: ChildProcess = spawn(SQLD_BIN, ['--db-path', join(dir, 'data.sqld'), '--http-listen-addr', `127.0.0.1:${port}`, '--no-welcome'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr?.on('data', (d) => (stderr += String(d)));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const until = Date.now() + 15_000;
  for (;;) {
    const ok = await fetch(`${url}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (proc.exitCode !== null || Date.now() > until) {
      proc.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`sqld did not come up on port ${port}: ${stderr.slice(-500)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const kill = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL');
      await exited;
    }
  };
  return {
    url,
    kill,
    async [Symbol.asyncDispose]() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
