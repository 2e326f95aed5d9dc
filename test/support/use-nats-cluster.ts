import { afterAll, beforeAll } from 'vitest';
import { startNatsCluster, type NatsCluster } from './nats-cluster.ts';

/**
 * Starts one private three-node cluster for the calling test file (beforeAll) and stops it after the file
 * (afterAll). Call at the file's top level; the returned accessor is valid inside tests and hooks.
 */
export function useNatsCluster(): () => NatsCluster {
  let cluster: NatsCluster | undefined;
  beforeAll(async () => {
    cluster = await startNatsCluster();
  }, 60_000);
  afterAll(async () => {
    await cluster?.[Symbol.asyncDispose]();
    cluster = undefined;
  });
  return () => {
    if (!cluster) throw new Error('useNatsCluster(): the cluster is only there inside tests and hooks of the file that called it');
    return cluster;
  };
}
