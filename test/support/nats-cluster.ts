import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NATS_SERVER_BIN, waitForInfo } from './nats.ts';
import { freePort } from './process.ts';

/** A node of the cluster: its server name, client URL, ports and store dir (its log is `<storeDir>.log`). */
export type ClusterNode = { name: string; url: string; port: number; clusterPort: number; storeDir: string };

export type NatsCluster = {
  /** Every node's client URL, comma-separated: what NATS_URL takes. */
  urls: string;
  nodes: readonly ClusterNode[];
  /** A connection of the helper's own (to every node), for a test's checks; closed on dispose. */
  nc: NatsConnection;
  /** SIGKILL node `i` and wait for its exit. */
  kill(i: number): Promise<void>;
  /** Starts node `i` again on the same ports and store dir (SIGKILLs it first if it runs) and waits for its client port. */
  restart(i: number): Promise<void>;
  /** Whether node `i`'s process runs. */
  running(i: number): boolean;
  /** Index of the running node leading stream `name`, waiting up to `timeoutMs` (default 15 000) for one to be elected. */
  streamLeader(name: string, timeoutMs?: number): Promise<number>;
  /** Resolves once stream `name` has a leader and every other replica is current (caught up), waiting up to `timeoutMs` (default 30 000). */
  streamCaughtUp(name: string, timeoutMs?: number): Promise<void>;
  /** Kills every node and removes the store dirs. */
  [Symbol.asyncDispose](): Promise<void>;
};

/** `n` distinct ports that were free a moment ago. */
async function freePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freePort());
  return [...ports];
}

/** Polls `f` until it returns a value other than undefined (errors count as undefined); throws `what` after `timeoutMs`. */
async function poll<T>(f: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await f();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Starts a private JetStream cluster of `size` (default 3) local nats-server processes, each with its own free client
 * and cluster port and temp store dir, routed to each other, and resolves once JetStream answers (a meta leader is
 * elected, and a stream with a replica on every node can be placed). Dispose (`await using`) kills them all and removes the dirs. Never touches a shared server.
 */
export async function startNatsCluster(options: { size?: number; name?: string } = {}): Promise<NatsCluster> {
  const size = options.size ?? 3;
  const clusterName = options.name ?? `c${process.pid}-${Math.floor(Math.random() * 1e6)}`;
  const root = mkdtempSync(join(tmpdir(), 'nats-cluster-'));
  const ports = await freePorts(2 * size);
  const nodes: ClusterNode[] = Array.from({ length: size }, (_, i) => {
    const storeDir = join(root, `n${i}`);
    mkdirSync(storeDir);
    return { name: `${clusterName}-n${i}`, url: `nats://127.0.0.1:${ports[i]!}`, port: ports[i]!, clusterPort: ports[size + i]!, storeDir };
  });
  const procs: Array<ChildProcess | undefined> = nodes.map(() => undefined);

  const launch = async (i: number) => {
    const node = nodes[i]!;
    const routes = nodes
      .filter((_, j) => j !== i)
      .map((n) => `nats://127.0.0.1:${n.clusterPort}`)
      .join(',');
    const args = [
      '-js',
      '-a',
      '127.0.0.1',
      '-p',
      String(node.port),
      '-sd',
      node.storeDir,
      '-n',
      node.name,
      '--cluster_name',
      clusterName,
      '--cluster',
      `nats://127.0.0.1:${node.clusterPort}`,
      '--routes',
      routes,
      '-l',
      `${node.storeDir}.log`,
    ];
    const p = spawn(NATS_SERVER_BIN, args, { stdio: 'ignore' });
    procs[i] = p;
    await waitForInfo(node.port, 15_000, { name: node.name, alive: () => p.exitCode === null && p.signalCode === null });
  };
  const kill = async (i: number) => {
    const p = procs[i];
    if (!p) return;
    procs[i] = undefined;
    if (p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise<void>((r) => p.once('exit', () => r()));
    p.kill('SIGKILL');
    await exited;
  };
  const killAll = async () => {
    await Promise.all(nodes.map((_, i) => kill(i)));
  };

  let nc: NatsConnection | undefined;
  try {
    await Promise.all(nodes.map((_, i) => launch(i)));
    nc = await connect({ servers: nodes.map((n) => n.url), name: 'test cluster helper', maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    const helper = nc;
    // the manager checks the JetStream API, which answers only once the nodes agreed on a meta leader
    const jsm: JetStreamManager = await poll(() => jetstreamManager(helper, { timeout: 2000 }), 30_000, 'the JetStream meta leader');
    // an elected meta leader may not yet count every node as a peer it can place replicas on ("no suitable peers for
    // placement" on a loaded machine): ready once a stream with a replica on each node can be created
    const probe = `CLUSTER_READY_${process.pid}`;
    await poll(
      async () => {
        await jsm.streams.add({ name: probe, subjects: [`${probe.toLowerCase()}.>`], num_replicas: size });
        await jsm.streams.delete(probe);
        return true;
      },
      30_000,
      'every node a peer the meta leader can place a replica on',
    );
    return {
      urls: nodes.map((n) => n.url).join(','),
      nodes,
      nc: helper,
      kill,
      restart: async (i) => {
        await kill(i);
        await launch(i);
      },
      running: (i) => procs[i] !== undefined,
      streamLeader: (name, timeoutMs = 15_000) =>
        poll(
          async () => {
            const leader = (await jsm.streams.info(name)).cluster?.leader;
            const i = nodes.findIndex((n) => n.name === leader);
            // a killed node may still be named until the others notice it is gone
            return i >= 0 && procs[i] !== undefined ? i : undefined;
          },
          timeoutMs,
          `a leader of stream ${name}`,
        ),
      streamCaughtUp: async (name, timeoutMs = 30_000) => {
        await poll(
          async () => {
            const cluster = (await jsm.streams.info(name)).cluster;
            const replicas = cluster?.replicas ?? [];
            return cluster?.leader && replicas.length === size - 1 && replicas.every((r) => r.current && !r.offline) ? true : undefined;
          },
          timeoutMs,
          `every replica of stream ${name} to catch up`,
        );
      },
      async [Symbol.asyncDispose]() {
        await helper.close().catch(() => undefined);
        await killAll();
        rmSync(root, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await nc?.close().catch(() => undefined);
    await killAll();
    rmSync(root, { recursive: true, force: true });
    throw error;
  }
}
