// What `npm run test:image` asks of a running container: its health, the uid of its process, how it stops, its logs.
import { docker, dockerResult, inspect } from './docker.ts';

/** Waits until the container's HEALTHCHECK reports healthy; throws, with its logs, when it exits, turns unhealthy or `timeoutMs` passes. */
export async function waitHealthy(container: string, timeoutMs = 90_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const [status, health] = (await inspect(container, '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}')).split(' ');
    if (health === 'healthy') return;
    if (status !== 'running' || health === 'unhealthy' || health === 'none' || Date.now() > until) {
      const why =
        status !== 'running'
          ? `is ${status}`
          : health === 'none'
            ? 'has no HEALTHCHECK'
            : health === 'unhealthy'
              ? 'turned unhealthy'
              : `is still ${health} after ${timeoutMs} ms`;
      throw new Error(`container ${container} ${why}\n${await logs(container)}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The real uid of the container's main process (PID 1), read from /proc inside it. */
export async function mainProcessUid(container: string): Promise<number> {
  const status = await docker(['exec', container, 'cat', '/proc/1/status']);
  const uid = /^Uid:\s+(\d+)/m.exec(status)?.[1];
  if (uid === undefined) throw new Error(`no Uid line in /proc/1/status of ${container}`);
  return Number(uid);
}

/** `docker stop -t <graceSeconds>` (SIGTERM, SIGKILL after the grace period): how long it took and the exit code. */
export async function stopWithin(container: string, graceSeconds: number): Promise<{ seconds: number; exitCode: number; oomKilled: boolean }> {
  const started = Date.now();
  await docker(['stop', '-t', String(graceSeconds), container], { timeoutMs: (graceSeconds + 30) * 1000 });
  const seconds = (Date.now() - started) / 1000;
  const [exitCode, oomKilled] = (await inspect(container, '{{.State.ExitCode}} {{.State.OOMKilled}}')).split(' ');
  return { seconds, exitCode: Number(exitCode), oomKilled: oomKilled === 'true' };
}

/** The container's stdout and stderr (the last 200 lines), headed by its name; never throws. */
export async function logs(container: string): Promise<string> {
  const r = await dockerResult(['logs', '--tail', '200', container]);
  return `--- logs of ${container} ---\n${r.stdout}${r.stderr}`.trimEnd();
}
