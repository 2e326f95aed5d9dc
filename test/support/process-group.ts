// Children that start children of their own (wrangler → workerd, `deno task` → deno run): each runs in a process
// group of its own and every signal goes to the whole group, so a SIGKILL in a failed test's cleanup leaves nothing.
import { spawnChild, type ChildHandle } from './process.ts';

/** Like spawnChild, in `cwd` (the repo root by default) and in a new process group that `stop`/`kill9` signal whole. */
export function spawnGroup(cmd: string, args: string[], env: Record<string, string> = {}, options: { cwd?: string } = {}): ChildHandle {
  return spawnChild(cmd, args, env, { ...options, group: true });
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
