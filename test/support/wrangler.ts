// The pinned wrangler, run offline: `wrangler dev --local` serves src/entry/worker.ts in workerd.
import { join } from 'node:path';
import { createTempDir } from './db.ts';
import { freePort, ROOT, waitForHttp, type ChildHandle } from './process.ts';
import { spawnGroup } from './process-group.ts';

export const WRANGLER = join(ROOT, 'node_modules/wrangler/bin/wrangler.js');
/** Keeps wrangler off the network: no telemetry, no update check, no download of the `Request.cf` object. */
export const OFFLINE = { WRANGLER_SEND_METRICS: 'false', WRANGLER_HIDE_BANNER: 'true', CLOUDFLARE_CF_FETCH_ENABLED: 'false' };

export type Worker = { url: string; child: ChildHandle };

/**
 * Starts `wrangler dev --local --test-scheduled` on free ports with `vars` as bindings (wrangler runs workerd as its
 * child) and waits for /health to answer; what stops it and removes its state is pushed onto `cleanups`. A port found
 * free can be taken before wrangler binds it (by another test's server, or as an outgoing connection's local port):
 * wrangler then exits with "Address already in use", and it is started again on other ports, up to three times.
 */
export async function startWorker(vars: Record<string, string>, cleanups: Array<() => Promise<void> | void>): Promise<Worker> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const inspector = await freePort();
    const state = createTempDir('hono-outbox-wrangler-');
    const args = [WRANGLER, 'dev', '--local', '--test-scheduled', '--ip', '127.0.0.1', '--port', String(port), '--inspector-port', String(inspector)];
    args.push('--persist-to', state.dir, '--show-interactive-dev-session=false', '--log-level', 'info');
    for (const [k, v] of Object.entries(vars)) args.push('--var', `${k}:${v}`);
    const child = spawnGroup(process.execPath, args, { ...OFFLINE, WRANGLER_LOG_PATH: state.dir });
    cleanups.push(() => state[Symbol.dispose]());
    // SIGTERM first: wrangler then removes the bundle it wrote under .wrangler/tmp in the repository (a SIGKILL leaves
    // it behind); what does not exit within 5 s is killed
    cleanups.push(async () => void (await child.stop('SIGTERM', 5000).catch(() => child.kill9())));
    const url = `http://127.0.0.1:${port}`;
    try {
      await waitForHttp(`${url}/health`, { child, timeoutMs: 45_000 });
      return { url, child };
    } catch (error) {
      if (attempt >= 3 || !child.output().includes('Address already in use')) throw error;
    }
  }
}
