// Children that start children of their own (wrangler → workerd, `deno task` → deno run): each runs in a process
// group of its own and every signal goes to the whole group, so a SIGKILL in a failed test's cleanup leaves nothing.
import { spawn } from 'node:child_process';
import { childEnv, ROOT, type ChildHandle, type Exit } from './process.ts';

/** Like spawnChild, in `cwd` (the repo root by default) and in a new process group that `stop`/`kill9` signal whole. */
export function spawnGroup(cmd: string, args: string[], env: Record<string, string> = {}, options: { cwd?: string } = {}): ChildHandle {
  const proc = spawn(cmd, args, { cwd: options.cwd ?? ROOT, env: childEnv(env), detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  proc.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = new Promise<Exit>((resolve, reject) => {
    proc.once('error', reject);
    proc.once('close', (code, signal) => resolve({ code, signal }));
  });
  let ended = false;
  void exited.then(
    () => (ended = true),
    () => (ended = true),
  );
  const signalGroup = (signal: NodeJS.Signals) => {
    if (ended || proc.pid === undefined) return;
    try {
      process.kill(-proc.pid, signal);
    } catch {
      // the group is gone already
    }
  };
  const kill9 = async () => {
    signalGroup('SIGKILL');
    return exited;
  };
  const stop = async (signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 15_000) => {
    signalGroup(signal);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        signalGroup('SIGKILL');
        reject(new Error(`process group did not exit within ${timeoutMs} ms of ${signal}; output:\n${out}${err}`));
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

/** Runs a command in its own group to completion (the group is killed after `timeoutMs`); returns its exit and output. */
export async function runGroupToExit(
  cmd: string,
  args: string[],
  env: Record<string, string>,
  options: { cwd?: string; timeoutMs: number },
): Promise<{ code: number | null; output: string }> {
  const child = spawnGroup(cmd, args, env, options);
  const timer = setTimeout(() => void child.kill9(), options.timeoutMs);
  try {
    const exit = await child.exited;
    return { code: exit.code, output: child.output() };
  } finally {
    clearTimeout(timer);
  }
}
