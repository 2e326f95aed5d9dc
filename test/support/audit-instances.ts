import { createClient, type Client } from '@libsql/client';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { parseConfig } from '../../src/config.ts';
import { streamSettingsFrom } from '../../src/nats/stream-settings.ts';
import { creditedEvent, openedEvent } from './accounts.ts';
import { createTempDir } from './db.ts';
import { eventually } from './eventually.ts';
import { natsClient, startNats } from './nats.ts';
import { FAULT_ENTRY, FIXTURE_ENTRY, freePort, runtimeCommand, spawnChild, withOutput, type ChildHandle } from './process.ts';
import { publishRaw } from './stream.ts';

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

/** The lease TTL the instances of startAuditInstances run with. */
export const AUDIT_LEASE_TTL_MS = 1500;

/**
 * A broker, a directory for the databases, and a way to start instances of `audit` alone over them (an instance with a
 * fault runs the fault entry: see test/support/fault-entry.ts). Everything it starts is stopped by `cleanups`, last
 * first.
 */
export async function startAuditInstances(cleanups: Array<() => Promise<unknown> | unknown>) {
  const nats = await startNats();
  const tmp = createTempDir();
  cleanups.push(
    () => tmp[Symbol.dispose](),
    () => nats[Symbol.asyncDispose](),
  );
  const auditUrl = `file:${join(tmp.dir, 'audit.db')}`;
  const env = {
    DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
    CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
    NATS_URL: nats.url,
    LOG_LEVEL: 'warn',
    CONSUMER_PARTITIONED: 'true',
    RELAY_LEASE_TTL_MS: String(AUDIT_LEASE_TTL_MS),
    // what a dead or paused instance held comes back soon; the new owner applies nothing newer of theirs before
    CONSUMER_ACK_WAIT_MS: '2000',
    CONSUMER_BATCH: '20',
    DATABASE_BUSY_TIMEOUT_MS: '30000',
    RELAY_BACKOFF_BASE_MS: '100',
    RELAY_MAX_BACKOFF_MS: '1000',
  };
  /** An instance serving /ready on a port of its own; with a fault, the fault entry. */
  const instance = async (name: string, fault?: string): Promise<Instance> => {
    const port = await freePort();
    const { cmd, args } = runtimeCommand('node', fault ? FAULT_ENTRY : FIXTURE_ENTRY);
    const entryArgs = fault ? ['--fixture', 'consume', 'audit'] : [];
    const child = spawnChild(cmd, [...args, ...entryArgs], {
      ...env,
      ROLES: 'consumers',
      CONSUMERS: 'audit',
      INSTANCE_NAME: name,
      METRICS_PORT: String(port),
      ...(fault ? { HONO_OUTBOX_TEST_FAULT: fault } : {}),
    });
    cleanups.push(() => child.kill9());
    return { ...child, url: `http://127.0.0.1:${port}` };
  };
  const nc = await natsClient(nats.url);
  cleanups.push(() => nc.close());
  const db = createClient({ url: auditUrl });
  cleanups.push(() => db.close());
  return { nc, jsm: await jetstreamManager(nc), db, auditUrl, dir: tmp.dir, instance };
}

/** 120 account ids of their own for one test. */
export const accountsNamed = (tag: string) => Array.from({ length: 120 }, (_, i) => `${tag}-${process.pid}-${i}`);

/** How many lines `file` holds (0 while it does not exist): the writes an `announce-write` fault announced. */
export function linesOf(file: string): number {
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').length - 1 : 0;
}

/** Publishes versions `from` … `to` of every account, a slice of 30 accounts at a time, `pauseMs` apart. */
export async function publishVersions(nc: NatsConnection, accounts: readonly string[], from: number, to: number, pauseMs = 0): Promise<void> {
  for (let version = from; version <= to; version++)
    for (let at = 0; at < accounts.length; at += 30) {
      await Promise.all(
        accounts.slice(at, at + 30).map((accountId) => {
          const e = version === 1 ? openedEvent({ accountId }) : creditedEvent({ accountId, version });
          return publishRaw(nc, STREAM, e, e.eventId);
        }),
      );
      if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
    }
}

/**
 * Waits (up to `timeoutMs`) for every version of every account, then checks each took effect once and each account's
 * in order; with `settleMs`, checks again after that long, so that a late duplicate would be seen.
 */
export async function expectAllOnceInOrder(
  db: Client,
  accounts: readonly string[],
  versions: number,
  waiting: Instance,
  options: { timeoutMs?: number; settleMs?: number } = {},
): Promise<void> {
  const total = accounts.length * versions;
  const count = async (sql: string) => Number((await db.execute(sql)).rows[0]![0]);
  await withOutput(
    waiting,
    eventually(async () => (await count('SELECT count(*) FROM inbox')) >= total, { timeoutMs: options.timeoutMs ?? 30_000, what: `${total} events applied` }),
  );
  if (options.settleMs) await new Promise((r) => setTimeout(r, options.settleMs));
  expect(await count('SELECT count(*) FROM inbox')).toBe(total);
  expect(await count('SELECT count(*) FROM audit_log')).toBe(total);
  const applied = new Map<string, number[]>();
  for (const r of (await db.execute('SELECT account_id, aggregate_version FROM audit_log ORDER BY n')).rows)
    applied.set(String(r.account_id), [...(applied.get(String(r.account_id)) ?? []), Number(r.aggregate_version)]);
  const expected = Array.from({ length: versions }, (_, i) => i + 1);
  for (const account of accounts) expect(applied.get(account), account).toEqual(expected);
}
