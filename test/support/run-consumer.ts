// Child process for crash tests: runs one subscriber's consumer runner against a subscriber database and a broker.
// Usage: node --import tsx test/support/run-consumer.ts <subscriber db url> <nats url> <stream> <prefix> <subscriber>
//          [--ack-wait-ms N] [--kill-after-commits N] [--until-idle]
// Prints one JSON line (the run summary) and exits 0 after SIGTERM/SIGINT or, with --until-idle, once idle.
// --kill-after-commits N: SIGKILLs itself after the N-th committed message, before acknowledging it.
import { createClient } from '@libsql/client';
import { connect } from '@nats-io/transport-node';
import { join } from 'node:path';
import { findSubscriber } from '../../src/consumers/subscribers.ts';
import { createAppRegistry } from '../../src/events/catalog.ts';
import { createConsumerRunner } from '../../src/inbox/consumer-runner.ts';
import { openSubscriberDatabase } from '../../src/inbox/subscriber-database.ts';
import { createLogger } from '../../src/logger.ts';
import { createMetrics } from '../../src/metrics/metrics.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import { TEST_STREAM } from './relay.ts';

const [url, natsUrl, streamName, prefix, name, ...flags] = process.argv.slice(2);
if (!url || !natsUrl || !streamName || !prefix || !name) {
  console.error('usage: run-consumer.ts <subscriber db url> <nats url> <stream> <prefix> <subscriber> [--ack-wait-ms N] [--kill-after-commits N] [--until-idle]');
  process.exit(64);
}
const flag = (f: string) => {
  const i = flags.indexOf(f);
  return i >= 0 ? Number(flags[i + 1]) : undefined;
};
const killAfter = flag('--kill-after-commits');

const client = createClient({ url, timeout: 5000 });
try {
  const db = await openSubscriberDatabase(client, join(import.meta.dirname, '../../db/consumer-migrations'));
  let commits = 0;
  const runner = createConsumerRunner({
    ...findSubscriber(name),
    db,
    registry: createAppRegistry(),
    log: createLogger('warn'),
    metrics: createMetrics(),
    connect: () => connect(natsConnectionOptions({ servers: [natsUrl], name: `run-consumer ${name}` })),
    stream: { ...TEST_STREAM, name: streamName, prefix },
    backoffBaseMs: 50,
    maxBackoffMs: 500,
    ...(flag('--ack-wait-ms') ? { ackWaitMs: flag('--ack-wait-ms')! } : {}),
    ...(killAfter
      ? {
          faults: {
            afterCommit() {
              if (++commits >= killAfter) process.kill(process.pid, 'SIGKILL');
            },
          },
        }
      : {}),
  });
  const stop = new AbortController();
  process.on('SIGTERM', () => stop.abort());
  process.on('SIGINT', () => stop.abort());
  const summary = await runner.run({ signal: stop.signal, untilIdle: flags.includes('--until-idle') });
  console.log(JSON.stringify(summary));
} catch (error) {
  console.error(String(error));
  process.exitCode = 1;
} finally {
  client.close();
}
