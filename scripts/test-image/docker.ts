// The docker CLI for `npm run test:image`: one call per helper, and a session that removes every container, volume
// and image tag it created, whatever happened.
import { execFile } from 'node:child_process';

/** What a docker command printed and its exit code; a failed command is a value here, `docker()` throws instead. */
export type DockerResult = { code: number; stdout: string; stderr: string };

/** Runs `docker <args>` and resolves with its output and exit code (never rejects; a timeout kills it, code -1). */
export function dockerResult(args: string[], options: { timeoutMs?: number; env?: Record<string, string> } = {}): Promise<DockerResult> {
  return new Promise((resolve) => {
    execFile(
      'docker',
      args,
      { timeout: options.timeoutMs ?? 60_000, maxBuffer: 64 * 1024 * 1024, env: { ...process.env, ...options.env } },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout: stdout.toString(), stderr: stderr.toString() || (error && code === -1 ? error.message : '') });
      },
    );
  });
}

/** Runs `docker <args>` and resolves with its trimmed stdout; throws with the command and its stderr when it fails. */
export async function docker(args: string[], options: { timeoutMs?: number; env?: Record<string, string> } = {}): Promise<string> {
  const r = await dockerResult(args, options);
  if (r.code !== 0) throw new Error(`docker ${args.join(' ')} failed (${r.code}):\n${r.stderr.trim() || r.stdout.trim()}`);
  return r.stdout.trim();
}

/** True when a docker CLI is on PATH and a daemon answers it. */
export async function dockerDaemonRuns(): Promise<boolean> {
  return (await dockerResult(['info', '--format', '{{.ServerVersion}}'], { timeoutMs: 20_000 })).code === 0;
}

/** `docker inspect -f <template> <name>`, trimmed. */
export function inspect(name: string, template: string): Promise<string> {
  return docker(['inspect', '-f', template, name]);
}

/** Containers, volumes and image tags created through it; `dispose()` removes them all (best effort, in that order). */
export type DockerSession = {
  /** A unique name with this session's suffix, e.g. for a container, volume or tag. */
  name(part: string): string;
  /** `docker run -d` with `args` (options, image, command) under a new container name; returns that name. */
  run(part: string, args: string[]): Promise<string>;
  /** `docker volume create` under a new name; returns it. */
  volume(part: string): Promise<string>;
  /** `docker build` of `context` tagged `tag` (the classic builder unless DOCKER_BUILDKIT says otherwise); removes the tag and the earlier stages' images on dispose. */
  build(tag: string, context: string, args?: string[]): Promise<void>;
  dispose(): Promise<void>;
};

/** A session whose names carry `prefix` and a random suffix, so parallel runs and leftovers never collide. */
export function dockerSession(prefix: string): DockerSession {
  const suffix = Math.random().toString(36).slice(2, 8);
  const containers: string[] = [];
  const volumes: string[] = [];
  const images: string[] = [];
  const name = (part: string) => `${prefix}-${part}-${suffix}`;
  return {
    name,
    async run(part, args) {
      const container = name(part);
      containers.push(container);
      await docker(['run', '-d', '--name', container, ...args]);
      return container;
    },
    async volume(part) {
      const volume = name(part);
      volumes.push(volume);
      await docker(['volume', 'create', volume]);
      return volume;
    },
    async build(tag, context, args = []) {
      images.push(tag);
      // the classic builder needs no registry for a Dockerfile frontend
      const env = { DOCKER_BUILDKIT: process.env.DOCKER_BUILDKIT ?? '0' };
      const r = await dockerResult(['build', ...args, '-t', tag, context], { timeoutMs: 30 * 60_000, env });
      images.push(...earlierStages(r.stdout));
      if (r.code !== 0) throw new Error(`docker build failed (${r.code}):\n${(r.stdout + r.stderr).trim().split('\n').slice(-40).join('\n')}`);
    },
    async dispose() {
      if (containers.length) await dockerResult(['rm', '-f', '-v', ...containers]);
      if (volumes.length) await dockerResult(['volume', 'rm', '-f', ...volumes]);
      for (const image of images) await dockerResult(['rmi', image], { timeoutMs: 120_000 });
    },
  };
}

/** The image ids that ended each stage but the last, from the classic builder's output (` ---> <id>` before a `FROM`). */
function earlierStages(output: string): string[] {
  const ids: string[] = [];
  let last: string | undefined;
  for (const line of output.split('\n')) {
    const id = /^ ---> ([0-9a-f]{12,})\s*$/.exec(line)?.[1];
    if (id) last = id;
    else if (/^Step \d+\/\d+ : FROM /i.test(line) && last) ids.push(last);
  }
  return ids;
}
