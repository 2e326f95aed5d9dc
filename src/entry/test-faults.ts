// Fault injection for crash tests, enabled only by HONO_OUTBOX_TEST_FAULT; never set it in production.
import type { RelayFaults } from '../outbox/relay-pass.ts';

/**
 * `kill-after-puback:<n>`: SIGKILL this process once n rows were acknowledged but before they are marked sent.
 */
export function relayFaultsFromEnv(env: Record<string, string | undefined>): RelayFaults | undefined {
  const spec = env.HONO_OUTBOX_TEST_FAULT;
  if (!spec) return undefined;
  const [name, arg] = spec.split(':');
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
