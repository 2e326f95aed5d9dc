// Child-process helpers for tests that run the service (or a relay/consumer) as a real process.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import type { RequestHandler } from './http.ts';

/** The repository root; children run with it as cwd so `--import tsx`, node_modules and deno.json resolve. */
export const ROOT = join(import.meta.dirname, '../..');

/** The service with crash hooks (HONO_OUTBOX_TEST_FAULT); run it as `<FAULT_ENTRY> [--fixture] node | relay | consume <name>`. */
export const FAULT_ENTRY = 'test/support/fault-entry.ts';

/** The test fixture's service (test/support/fixture) as a process, roles from ROLES like src/entry/node.ts. */
export const FIXTURE_ENTRY = 'test/support/fixture/entry.ts';

export type Runtime = 'node' | 'bun' | 'deno';
export const RUNTIMES: readonly Runtime[] = ['node', 'bun', 'deno'];

export type Exit = { code: number | null; signal: NodeJS.Signals | null };

/** The command line that runs a TypeScript `entry` (path relative to the repo root) on `runtime`. */
export function runtimeCommand(runtime: Runtime, entry: string): { cmd: string; args: string[] } {
  switch (runtime) {
    case 'node':
      return { cmd: process.execPath, args: ['--import', 'tsx', entry] };
    case 'bun':
      return { cmd: join(ROOT, 'node_modules/.bin/bun'), args: [entry] };
    case 'deno':
      return { cmd: join(ROOT, 'node_modules/deno/deno'), args: ['run', '-A', entry] };
  }
}

/**
 * A minimal environment for children: only what runtimes need to start (PATH, HOME, temp dir, locale), so a
 * developer's DATABASE_URL or NODE_OPTIONS cannot leak into a test; `env` adds the variables under test.
 */
export function childEnv(env: Record<string, string> = {}): Record<string, string> {
  const base: Record<string, string> = {};
  for (const k of ['PATH', 'HOME', 'TMPDIR', 'LANG', 'DENO_DIR']) {
    const v = process.env[k];
    if (v !== undefined) base[k] = v;
  }
  return { ...base, NO_COLOR: '1', ...env };
}

/** A TCP port that was free a moment ago (listen on 0, read the port, close). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => (port ? resolve(port) : reject(new Error('no port assigned'))));
    });
  });
}

/**
 * SIGSTOPs process `pid` and resolves once every one of its threads is stopped. The kernel stops a multi-threaded
 * process only when one of its threads next runs, so on a loaded machine the others go on for milliseconds after
 * kill() returns; a test that needs the process frozen must wait for it. Throws after `timeoutMs`.
 */
export async function freeze(pid: number, timeoutMs = 5000): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  const until = Date.now() + timeoutMs;
  while (!allThreadsStopped(pid)) {
    if (Date.now() > until) throw new Error(`process ${pid} did not stop within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** Whether every thread of `pid` is in the stopped state ('T' in /proc/<pid>/task/<tid>/stat); false if it is gone. */
function allThreadsStopped(pid: number): boolean {
  try {
    return readdirSync(`/proc/${pid}/task`).every((tid) => {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      return /^[Tt]$/.test(stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3));
    });
  } catch {
    return false;
  }
}

export type ChildHandle = {
  proc: ChildProcess;
  /** Everything the child wrote to stdout and stderr so far (for assertion messages). */
  output(): string;
  stdout(): string;
  stderr(): string;
  /** Settles when the child has exited. */
  exited: Promise<Exit>;
  /** Sends `signal` and waits for the exit; after `timeoutMs` it SIGKILLs and rejects. */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<Exit>;
  /** SIGKILLs the child (a crash) and waits for the exit. */
  kill9(): Promise<Exit>;
  [Symbol.asyncDispose](): Promise<void>;
};

/**
 * Spawns `cmd args` (in the repo root unless `cwd` is given) with a minimal env, capturing its output. With
 * `group`, the child leads a process group of its own and every signal goes to the whole group, so children of
 * its own (wrangler → workerd, `deno task` → deno run) never outlive a failed test.
 */
export function spawnChild(cmd: string, args: string[], env: Record<string, string> = {}, options: { cwd?: string; group?: boolean } = {}): ChildHandle {
  const proc = spawn(cmd, args, { cwd: options.cwd ?? ROOT, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'], detached: options.group ?? false });
  let out = '';
  let err = '';
  proc.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
  proc.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = new Promise<Exit>((resolve, reject) => {
    proc.once('error', reject);
    proc.once('close', (code, signal) => resolve({ code, signal }));
  });
  let ended = false;
  void exited.then(
    () => (ended = true),
    () => (ended = true),
  );
  const signal = (sig: NodeJS.Signals) => {
    if (ended || proc.pid === undefined) return;
    try {
      if (options.group) process.kill(-proc.pid, sig);
      else proc.kill(sig);
    } catch {
      // already gone
    }
  };
  const kill9 = async () => {
    signal('SIGKILL');
    return exited;
  };
  const stop = async (sig: NodeJS.Signals = 'SIGTERM', timeoutMs = 15_000) => {
    signal(sig);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        signal('SIGKILL');
        reject(new Error(`process did not exit within ${timeoutMs} ms of ${sig}; output:\n${out}${err}`));
      }, timeoutMs);
    });
    try {
      return await Promise.race([exited, timeout]);
    } finally {
      clearTimeout(timer);
    }
  };
  return {
    proc,
    output: () => out + err,
    stdout: () => out,
    stderr: () => err,
    exited,
    stop,
    kill9,
    async [Symbol.asyncDispose]() {
      await kill9();
    },
  };
}

/** Runs a child to completion (bounded by `timeoutMs`) and returns its exit and output. */
export async function runToExit(
  cmd: string,
  args: string[],
  env: Record<string, string> = {},
  timeoutMs = 30_000,
): Promise<Exit & { stdout: string; stderr: string }> {
  const child = spawnChild(cmd, args, env);
  let timer: NodeJS.Timeout | undefined;
  try {
    const exit = await Promise.race([
      child.exited,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${cmd} ${args.join(' ')} still running after ${timeoutMs} ms:\n${child.output()}`)), timeoutMs);
      }),
    ]);
    return { ...exit, stdout: child.stdout(), stderr: child.stderr() };
  } finally {
    clearTimeout(timer);
    await child.kill9();
  }
}

export type ServiceHandle = ChildHandle & { port: number; url: string };

/**
 * Starts `entry` (e.g. `src/entry/node.ts`, or a relay/consumer entry) on `runtime` as a child process, with
 * `entryArgs` after it. PORT is set to a free port unless `env.PORT` is given; `url` is `http://127.0.0.1:<port>`.
 * It does not wait for readiness: call `waitForHttp(`${url}/health`, { child })` for processes that serve HTTP.
 */
export async function spawnService(runtime: Runtime, entry: string, env: Record<string, string> = {}, entryArgs: string[] = []): Promise<ServiceHandle> {
  const port = env.PORT ? Number(env.PORT) : await freePort();
  const { cmd, args } = runtimeCommand(runtime, entry);
  const child = spawnChild(cmd, [...args, ...entryArgs], { HOST: '127.0.0.1', ...env, PORT: String(port) });
  return { ...child, port, url: `http://127.0.0.1:${port}` };
}

/**
 * Polls `url` until it answers with a status below 500, or rejects after `timeoutMs`. When `child` is given,
 * rejects as soon as it exits, with its output, instead of waiting out the timeout.
 */
export async function waitForHttp(url: string, options: { timeoutMs?: number; child?: ChildHandle } = {}): Promise<Response> {
  const deadline = Date.now() + (options.timeoutMs ?? 20_000);
  let exited: Exit | undefined;
  void options.child?.exited.then((e) => (exited = e));
  let last: unknown;
  while (Date.now() < deadline) {
    if (exited) {
      throw new Error(`process exited (${JSON.stringify(exited)}) before ${url} answered; output:\n${options.child!.output()}`);
    }
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
      if (res.status < 500) return res;
      last = `HTTP ${res.status}`;
      await res.body?.cancel();
    } catch (error) {
      last = error;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer within the timeout (last: ${String(last)}); output:\n${options.child?.output() ?? ''}`);
}

/** A running process's HTTP API as a RequestHandler (`postJson(overHttp(service.url), '/orders', body)`). */
export function overHttp(url: string): RequestHandler {
  return { request: (path, init) => fetch(`${url}${path}`, init) };
}

/** Waits for `wait`; when it fails, the error carries `child`'s output, which usually says why. */
export async function withOutput<T>(child: Pick<ChildHandle, 'output'>, wait: Promise<T>): Promise<T> {
  try {
    return await wait;
  } catch (error) {
    throw new Error(`${error instanceof Error ? error.message : String(error)}; output:\n${child.output()}`, { cause: error });
  }
}
