// Fault injection for crash tests, enabled only by HONO_OUTBOX_TEST_FAULT; never set it in production.
import { existsSync, writeFileSync } from 'node:fs';
import type { ConsumerFaults } from '../inbox/consumer-runner.ts';
import type { RelayFaults } from '../outbox/relay-pass.ts';

/**
 * `kill-after-puback:<n>`: SIGKILL this process once n rows were acknowledged but before they are marked sent.
 * `mark-before-puback`: the broken relay that marks rows sent before publishing them, and crashes in between
 * on its first pass with rows (so the checker has a loss to find).
 */
export function relayFaultsFromEnv(env: Record<string, string | undefined>): RelayFaults | undefined {
  const spec = (env.HONO_OUTBOX_TEST_FAULT ?? '').split(',').find((f) => !f.startsWith('no-inbox') && !f.startsWith('kill-after-commit'));
  if (!spec) return undefined;
  const [name, arg] = spec.split(':');
  if (name === 'mark-before-puback') {
    return {
      markBeforePublish: true,
      beforePublishing(rows) {
        if (rows.length >= 1) process.kill(process.pid, 'SIGKILL');
      },
    };
  }
  if (name === 'kill-after-puback') {
    let acked = 0;
    const after = Number(arg ?? 1);
    return {
      afterPubAcks(rows) {
        acked += rows.length;
        if (acked >= after) process.kill(process.pid, 'SIGKILL');
      },
    };
  }
  throw new Error(`unknown HONO_OUTBOX_TEST_FAULT ${spec}`);
}

/**
 * `kill-after-commit:<n>[:<marker file>]`: SIGKILL this subscriber once n messages committed but before they are
 * acknowledged; with a marker file, only the first process that gets there dies. Combines with `no-inbox`
 * (comma-separated) for the broken variant the torture checker must catch.
 */
export function consumerFaultsFromEnv(env: Record<string, string | undefined>): ConsumerFaults | undefined {
  const spec = (env.HONO_OUTBOX_TEST_FAULT ?? '').split(',').find((f) => f.startsWith('kill-after-commit'));
  if (!spec) return undefined;
  const [, arg, marker] = spec.split(':');
  if (marker && existsSync(marker)) return undefined;
  let committed = 0;
  const after = Number(arg ?? 1);
  return {
    afterCommit() {
      if (++committed < after) return;
      if (marker) writeFileSync(marker, String(process.pid));
      process.kill(process.pid, 'SIGKILL');
    },
  };
}
