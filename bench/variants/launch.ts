// Child processes of the benchmarks: the real service entries, the baseline variants, subscribers and the
// compactor, each in its own process group so a stop also ends whatever it started; loopback addresses only.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { childEnv, freePort, ROOT, runtimeCommand, waitForHttp, type Runtime } from '../../test/support/process.ts';

export type Child = {
  name: string;
  proc: ChildProcess;
  output(): string;
  /** Lines the child wrote to stdout, as they arrive, with the local time of arrival. */
  onLine(fn: (line: string, atMs: number) => void): void;
  exited: Promise<number | null>;
  /** SIGTERM to the group, then SIGKILL after `graceMs`; never throws. */
  stop(graceMs?: number): Promise<void>;
};

/** Spawns `cmd args` in the repo root as the leader of a new process group, with only `env` added to a minimal environment. */
export function startChild(name: string, cmd: string, args: string[], env: Record<string, string>): Child {
  const proc = spawn(cmd, args, { cwd: ROOT, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let out = '';
  const listeners: Array<(line: string, atMs: number) => void> = [];
  let partial = '';
  proc.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    const at = Date.now();
    const lines = (partial + d).split('\n');
    partial = lines.pop()!;
    for (const l of lines) for (const fn of listeners) fn(l, at);
  });
  proc.stderr!.setEncoding('utf8').on('data', (d: string) => (out = (out + d).slice(-20_000)));
  const exited = new Promise<number | null>((resolve) => proc.once('close', (code) => resolve(code)));
  proc.once('error', () => undefined);
  const alive = () => proc.exitCode === null && proc.signalCode === null;
  const signalGroup = (sig: NodeJS.Signals) => {
    try {
      process.kill(-proc.pid!, sig);
    } catch {
      // the group is gone already
    }
  };
  return {
    name,
    proc,
    output: () => out,
    onLine: (fn) => void listeners.push(fn),
    exited,
    async stop(graceMs = 10_000) {
      if (alive()) signalGroup('SIGTERM');
      const timer = setTimeout(() => signalGroup('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
      signalGroup('SIGKILL'); // anything the child left behind in its group
    },
  };
}

export type Server = Child & { url: string; port: number };

/** Starts a TypeScript `entry` serving HTTP on `runtime` (PORT = a free loopback port) and waits for GET /health. */
export async function startServer(name: string, runtime: Runtime, entry: string, env: Record<string, string>): Promise<Server> {
  const port = await freePort();
  const { cmd, args } = runtimeCommand(runtime, entry);
  const child = startChild(name, cmd, args, { HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...env, PORT: String(port) });
  const url = `http://127.0.0.1:${port}`;
  let exitCode: number | null | undefined;
  void child.exited.then((c) => (exitCode = c));
  try {
    await Promise.race([
      waitForHttp(`${url}/health`, { timeoutMs: 60_000 }),
      child.exited.then(() => {
        throw new Error(`exited with ${exitCode}`);
      }),
    ]);
  } catch (error) {
    await child.stop();
    throw new Error(`${name} on ${runtime} did not start: ${String(error)}\n${child.output()}`);
  }
  return { ...child, url, port };
}

/** How to run a subscriber as its own process: what `npm run consume -- <name>` runs (node directly when the script is a plain tsx entry). */
export function subscriberCommand(name: string): { how: string; cmd: string; args: string[] } {
  const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts?: Record<string, string> }).scripts ?? {};
  const consume = scripts.consume;
  if (!consume) throw new Error('package.json has no `consume` script: run bench:lag with --subscriber inline');
  const direct = /^node --import tsx (\S+\.ts)$/.exec(consume.trim());
  if (direct && existsSync(join(ROOT, direct[1]!))) {
    const { cmd, args } = runtimeCommand('node', direct[1]!);
    return { how: `npm run consume -- ${name}`, cmd, args: [...args, name] };
  }
  return { how: `npm run consume -- ${name}`, cmd: 'npm', args: ['run', '--silent', 'consume', '--', name] };
}

/** Reads `--name value` as a string, or the default. */
export function stringArg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : fallback;
}
