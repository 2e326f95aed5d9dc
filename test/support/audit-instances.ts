import type { JetStreamManager } from '@nats-io/jetstream';
import { parseConfig } from '../../src/config.ts';
import { streamSettingsFrom } from '../../src/nats/stream-settings.ts';
import { eventually } from './eventually.ts';
import { withOutput, type ChildHandle } from './process.ts';

// Helpers for tests that run several partitioned instances of the fixture's `audit` subscriber as processes.

/** The stream a service uses with the default configuration (HONO_OUTBOX, subjects hono-outbox.>). */
export const STREAM = streamSettingsFrom(parseConfig({}));
export const PARTITIONS = 16;
/** The durable of `audit`'s partition `k`. */
export const durable = (k: number) => `hono-outbox-audit-p${k}`;

/** An instance process serving /ready at `url`. */
export type Instance = ChildHandle & { url: string };
type Ready = { leases?: { subscribers?: Array<{ partitions: number[] }> } };

/** The partitions an instance holds, from its /ready; undefined while it does not answer. */
export async function partitionsOf(i: Instance): Promise<number[] | undefined> {
  try {
    const body = (await (await fetch(`${i.url}/ready`, { signal: AbortSignal.timeout(1000) })).json()) as Ready;
    return body.leases?.subscribers?.[0]?.partitions;
  } catch {
    return undefined;
  }
}

/** Waits until `a` and `b` hold eight partitions each and every partition durable exists; resolves with `a`'s. */
export async function splitEvenly(jsm: JetStreamManager, a: Instance, b: Instance): Promise<number[]> {
  let ofA: number[] = [];
  await withOutput(
    b,
    eventually(
      async () => {
        ofA = (await partitionsOf(a)) ?? [];
        return ofA.length === 8 && (await partitionsOf(b))?.length === 8;
      },
      { timeoutMs: 30_000, what: 'eight partitions each' },
    ),
  );
  await eventually(async () => (await jsm.consumers.info(STREAM.name, durable(PARTITIONS - 1)).catch(() => null)) !== null, { what: 'the partition durables' });
  return ofA;
}
