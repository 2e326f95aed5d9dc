import { connect, type NatsConnection } from '@nats-io/transport-node';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, freeze } from './process.ts';

export const NATS_SERVER_BIN = ['/usr/sbin/nats-server', '/usr/bin/nats-server', '/usr/local/bin/nats-server'].find(existsSync) ?? 'nats-server';

/**
 * Resolves once a nats-server answers INFO on `port` (127.0.0.1) — with `ours.name` as its name when given, so that
 * another test's server that took the port first does not pass for ours; throws after `deadlineMs`, or as soon as
 * `ours.alive()` says the process has exited.
 */
export async function waitForInfo(port: number, deadlineMs: number, ours?: { name: string; alive: () => boolean }): Promise<void> {
  const until = Date.now() + deadlineMs;
  const serverName = ours?.name;
  for (;;) {
    if (ours && !ours.alive()) throw new Error(`nats-server ${ours.name} exited before answering on port ${port} (taken by another process?)`);
    const ok = await new Promise<boolean>((resolve) => {
      const sock = tcpConnect(port, '127.0.0.1');
      sock.setTimeout(500);
      sock.once('data', (d) => {
        sock.destroy();
        const text = d.toString();
        resolve(text.startsWith('INFO') && (serverName === undefined || text.includes(`"server_name":${JSON.stringify(serverName)}`)));
      });
      sock.once('error', () => resolve(false));
      sock.once('timeout', () => {
        sock.destroy();
        resolve(false);
      });
    });
    if (ok) return;
    if (Date.now() > until) throw new Error(`nats-server on port ${port} did not come up`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export type NatsServer = {
  url: string;
  port: number;
  wsPort?: number;
  storeDir: string;
  /** Graceful stop (SIGTERM) and wait for exit. */
  stop(): Promise<void>;
  /** SIGKILL and wait for exit. */
  kill(): Promise<void>;
  /** Starts again on the same port and store dir (after stop or kill). */
  restart(): Promise<void>;
  /** SIGSTOPs the server and resolves once all its threads are stopped. */
  pause(): Promise<void>;
  resume(): void;
  [Symbol.asyncDispose](): Promise<void>;
};

/** Starts a private `nats-server -js` on a free port with a temp store dir; dispose stops it and removes the dir. */
export async function startNats(options: { websocket?: boolean } = {}): Promise<NatsServer> {
  let port = await freePort();
  const wsPort = options.websocket ? await freePort() : undefined;
  const storeDir = mkdtempSync(join(tmpdir(), 'nats-store-'));
  let proc: ChildProcess | undefined;
  let configFile: string | undefined;
  if (wsPort) {
    const { writeFileSync } = await import('node:fs');
    configFile = join(storeDir, 'server.conf');
    writeFileSync(configFile, `websocket { listen: "127.0.0.1:${wsPort}"\n no_tls: true }\n`);
  }

  // a name of its own: a free port can be taken by another test file's server before ours binds it
  const name = `test-${process.pid}-${storeDir.slice(-6)}`;
  const launch = async () => {
    const args = ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', storeDir, '-n', name, ...(configFile ? ['-c', configFile] : [])];
    const p = spawn(NATS_SERVER_BIN, args, { stdio: 'ignore' });
    proc = p;
    await waitForInfo(port, 15_000, { name, alive: () => p.exitCode === null && p.signalCode === null });
  };
  const launchOnFreePort = async () => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await launch();
      } catch (error) {
        if (attempt >= 5) throw error;
        port = await freePort();
      }
    }
  };
  const waitExit = (p: ChildProcess) =>
    p.exitCode !== null || p.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => p.once('exit', () => r()));
  const end = async (signal: NodeJS.Signals) => {
    const p = proc;
    if (!p) return;
    proc = undefined;
    p.kill('SIGCONT');
    p.kill(signal);
    await waitExit(p);
  };

  await launchOnFreePort();
  const server: NatsServer = {
    url: `nats://127.0.0.1:${port}`,
    port,
    ...(wsPort ? { wsPort } : {}),
    storeDir,
    stop: () => end('SIGTERM'),
    kill: () => end('SIGKILL'),
    restart: async () => {
      await end('SIGKILL');
      await launch();
    },
    pause: async () => {
      if (proc?.pid !== undefined) await freeze(proc.pid);
    },
    resume: () => void proc?.kill('SIGCONT'),
    async [Symbol.asyncDispose]() {
      await end('SIGKILL');
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
  return server;
}

/** A client connection to `url` for a test's own use; close it when done. */
export async function natsClient(url: string): Promise<NatsConnection> {
  return connect({ servers: [url], name: 'test client' });
}
