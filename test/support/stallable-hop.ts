import { createServer, connect as tcpConnect, type Server, type Socket } from 'node:net';

type Link = { client: Socket; upstream: Socket; clientGone: boolean };
type Chunk = { link: Link; data: Buffer; toBroker: boolean; wpi: boolean };

const WPI = Buffer.from('+WPI');

/** A TCP hop between clients and a broker whose path can stall like a network partition (see startStallableHop). */
export type StallableHop = {
  /** nats://127.0.0.1:<port>: clients connect here instead of to the broker. */
  url: string;
  /** When progress heartbeats (+WPI acks) from clients passed through to the broker while the path was up. */
  sentWpi: number[];
  /** The path stalls: from now on every byte either way is kept, none is delivered. */
  stall(): void;
  /** The path stalls right before the next client bytes that contain `text`: those are kept too. */
  stallOn(text: string): void;
  /** How many kept client chunks hold a progress heartbeat. */
  keptWpi(): number;
  /** Whether the kept client bytes contain `text` (a pull request's subject, …). */
  keptIncludes(text: string): boolean;
  /** Part of the path heals: the kept client bytes up to and including the `n`-th kept heartbeat reach the broker, in order. */
  deliverThroughWpi(n: number): void;
  /**
   * The path heals: every kept byte reaches its side, in order (the broker's bytes only to clients still there), and the
   * connections of clients that died meanwhile end after their kept bytes, as TCP delivers a dead process's FIN.
   */
  heal(): void;
  close(): Promise<void>;
};

/**
 * Starts a hop to the broker on `upstreamPort` (127.0.0.1). While the path is up bytes pass at once; stalled, they are
 * kept — nothing is lost — and reach the other side only once it heals, as TCP retransmission delivers them after a
 * network partition of the client's host (even from a process that died meanwhile: its kernel keeps sending).
 */
export async function startStallableHop(upstreamPort: number): Promise<StallableHop> {
  const links = new Set<Link>();
  const kept: Chunk[] = [];
  const sentWpi: number[] = [];
  let stalled = false;
  let stallOn: Buffer | undefined;
  const server: Server = createServer((client) => {
    const upstream = tcpConnect(upstreamPort, '127.0.0.1');
    const link: Link = { client, upstream, clientGone: false };
    links.add(link);
    client.on('data', (data: Buffer) => {
      const wpi = data.includes(WPI);
      if (stallOn && data.includes(stallOn)) {
        stalled = true;
        stallOn = undefined;
      }
      if (stalled) kept.push({ link, data, toBroker: true, wpi });
      else {
        upstream.write(data);
        if (wpi) sentWpi.push(Date.now());
      }
    });
    upstream.on('data', (data: Buffer) => {
      if (stalled) kept.push({ link, data, toBroker: false, wpi: false });
      else if (!link.clientGone) client.write(data);
    });
    client.on('close', () => {
      link.clientGone = true;
      if (!stalled) upstream.end();
    });
    client.on('error', () => undefined);
    upstream.on('error', () => undefined);
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  const pass = (c: Chunk) => {
    if (c.toBroker) c.link.upstream.write(c.data);
    else if (!c.link.clientGone) c.link.client.write(c.data);
  };
  return {
    url: `nats://127.0.0.1:${port}`,
    sentWpi,
    stall: () => void (stalled = true),
    stallOn: (text) => void (stallOn = Buffer.from(text)),
    keptWpi: () => kept.filter((c) => c.wpi).length,
    keptIncludes: (text) => kept.some((c) => c.toBroker && c.data.includes(text)),
    deliverThroughWpi(n) {
      let seen = 0;
      for (let i = 0; i < kept.length && seen < n; ) {
        const c = kept[i]!;
        if (!c.toBroker) {
          i++; // the broker's bytes wait for the whole path
          continue;
        }
        kept.splice(i, 1);
        if (c.wpi) seen++;
        pass(c);
      }
    },
    heal() {
      stalled = false;
      for (const c of kept.splice(0)) pass(c);
      for (const l of links) if (l.clientGone) l.upstream.end();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const l of links) {
          l.client.destroy();
          l.upstream.destroy();
        }
        server.close(() => resolve());
      }),
  };
}
