// The torture run's broker: one nats-server (test/support/nats.ts), or a three-node JetStream cluster started here,
// so the run does not depend on another test helper. Faults: a whole-broker outage (every node SIGKILLed, then
// restarted: the backlog phase) and a one-node restart (the schedule's broker restarts: the single server, or the
// stream's leader node of the cluster).
import { jetstreamManager, type StreamInfo } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { NATS_SERVER_BIN, startNats, waitForInfo } from '../test/support/nats.ts';
import { freePort } from '../test/support/process.ts';

export type Broker = {
  /** NATS_URL for the processes: one URL, or the cluster's three comma-separated. */
  url: string;
  servers: string[];
  /** Nodes (1 or 3); the stream is created with this many replicas. */
  replicas: number;
  /** SIGKILLs every node (the broker is down until restart). */
  kill(): Promise<void>;
  /** Starts every node again on its port and store (after kill), and waits until JetStream answers. */
  restart(): Promise<void>;
  /**
   * SIGKILLs one node, waits `downForMs`, starts it again: the single server, or the cluster node leading `stream`
   * (another, in turn, when no leader is known). Then waits (bounded) until the stream's replicas are current again,
   * so the next fault never takes a second node of the quorum. Returns the node and whether it led the stream.
   */
  restartOne(stream: string, downForMs: number): Promise<{ node: string; leader: boolean }>;
  [Symbol.asyncDispose](): Promise<void>;
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One nats-server (`cluster` false) or a three-node cluster with its stores and logs under `dir`. */
export async function startBroker(o: { cluster: boolean; dir: string; log: (line: string) => void }): Promise<Broker> {
  if (!o.cluster) {
    const nats = await startNats();
    return {
      url: nats.url,
      servers: [nats.url],
      replicas: 1,
      kill: () => nats.kill(),
      restart: () => nats.restart(),
      async restartOne(_stream, downForMs) {
        await nats.kill();
        await sleep(downForMs);
        await nats.restart();
        return { node: 'nats-server', leader: true };
      },
      [Symbol.asyncDispose]: () => nats[Symbol.asyncDispose](),
    };
  }
  return startCluster(o.dir, o.log);
}

type Node = { name: string; port: number; clusterPort: number; storeDir: string; proc?: ChildProcess | undefined };

async function startCluster(dir: string, log: (line: string) => void): Promise<Broker> {
  const clusterName = `torture-${process.pid}`;
  const nodes: Node[] = [];
  for (let i = 1; i <= 3; i++) {
    const storeDir = join(dir, `nats-n${i}`);
    mkdirSync(storeDir, { recursive: true });
    nodes.push({ name: `n${i}`, port: await freePort(), clusterPort: await freePort(), storeDir });
  }
  const servers = nodes.map((n) => `nats://127.0.0.1:${n.port}`);
  const launch = async (n: Node) => {
    const routes = nodes
      .filter((m) => m !== n)
      .map((m) => `nats://127.0.0.1:${m.clusterPort}`)
      .join(',');
    const args = [
      '-js',
      '-a',
      '127.0.0.1',
      '-p',
      String(n.port),
      '-sd',
      n.storeDir,
      '-n',
      n.name,
      '--cluster_name',
      clusterName,
      '--cluster',
      `nats://127.0.0.1:${n.clusterPort}`,
      '--routes',
      routes,
      '-l',
      join(dir, `nats-${n.name}.log`),
    ];
    n.proc = spawn(NATS_SERVER_BIN, args, { stdio: 'ignore' });
    await waitForInfo(n.port, 15_000);
  };
  const end = async (n: Node) => {
    const p = n.proc;
    if (!p) return;
    n.proc = undefined;
    p.kill('SIGCONT');
    p.kill('SIGKILL');
    if (p.exitCode === null && p.signalCode === null) await new Promise<void>((r) => p.once('exit', () => r()));
  };
  /** A short-lived client of the live nodes (it never reconnects: a fault ends its use). */
  const client = () => connect({ servers, maxReconnectAttempts: 0, timeout: 2000 });
  const withClient = async <T>(f: (nc: NatsConnection) => Promise<T>): Promise<T> => {
    const nc = await client();
    try {
      return await f(nc);
    } finally {
      await nc.close().catch(() => undefined);
    }
  };
  /** Until JetStream answers through the cluster (a meta leader is elected). */
  const jetStreamUp = async (timeoutMs: number) => {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const ok = await withClient(async (nc) => (await (await jetstreamManager(nc, { timeout: 2000 })).getAccountInfo(), true)).catch(() => false);
      if (ok) return;
      if (Date.now() > until) throw new Error(`torture: the JetStream cluster did not answer within ${timeoutMs} ms`);
      await sleep(250);
    }
  };
  const streamInfo = (stream: string) => withClient(async (nc) => (await jetstreamManager(nc, { timeout: 2000 })).streams.info(stream));
  let turn = 0;

  await Promise.all(nodes.map(launch));
  await jetStreamUp(60_000);
  return {
    url: servers.join(','),
    servers,
    replicas: 3,
    async kill() {
      await Promise.all(nodes.map(end));
    },
    async restart() {
      await Promise.all(nodes.map(launch));
      await jetStreamUp(60_000);
    },
    async restartOne(stream, downForMs) {
      const leaderName = (await streamInfo(stream).catch(() => undefined))?.cluster?.leader;
      const leader = nodes.find((n) => n.name === leaderName);
      const node = leader ?? nodes[turn++ % nodes.length]!;
      await end(node);
      await sleep(downForMs);
      await launch(node);
      // the next fault may take another node: first let this one catch up, so the stream keeps its quorum
      const until = Date.now() + 30_000;
      let info: StreamInfo | undefined;
      for (;;) {
        info = await streamInfo(stream).catch(() => undefined);
        const replicas = info?.cluster?.replicas ?? [];
        if (info?.cluster?.leader && replicas.length === nodes.length - 1 && replicas.every((r) => r.current && !r.offline)) break;
        if (Date.now() > until) {
          log(`torture: node ${node.name} restarted, but stream ${stream} is not fully current after 30 s (${JSON.stringify(info?.cluster ?? null)})`);
          break;
        }
        await sleep(200);
      }
      return { node: node.name, leader: !!leader };
    },
    async [Symbol.asyncDispose]() {
      await Promise.all(nodes.map(end));
    },
  };
}
