// A relay told to stop while it connects (the moment its connect succeeds, or while it ensures the stream right
// after) claims no partition and publishes nothing: a relay drained in a rolling deploy starts no pass.
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { describe, expect, it } from 'vitest';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import { createRelay } from '../../src/outbox/relay.ts';
import { accountCommands } from '../support/accounts.ts';
import { createTestDb } from '../support/db.ts';
import { relayDeps } from '../support/relay.ts';
import { createStream, ownStream, readStream } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('relay - a stop that lands while it connects', () => {
  for (const [when, schedule] of [
    ['the moment its connect succeeds', (stop: () => void) => queueMicrotask(() => queueMicrotask(() => queueMicrotask(stop)))],
    ['while it ensures its stream right after connecting', (stop: () => void) => setTimeout(stop, 0)],
  ] as const) {
    it(`publishes nothing and leaves no connection open when its stop lands ${when}`, async () => {
      // a stop racing a successful connect, with a backlog waiting
      await using t = await createTestDb();
      const stream = ownStream('STOPRACE');
      await createStream(nats().nc, stream);
      await accountCommands(t.deps).openMany(30);
      const abort = new AbortController();
      const opened: NatsConnection[] = [];
      const deps = relayDeps(t, nats().url, {
        stream,
        connect: async () => {
          const nc = await connect(natsConnectionOptions({ servers: [nats().url], name: 'race relay' }));
          opened.push(nc);
          schedule(() => abort.abort());
          return nc;
        },
      });
      const started = Date.now();
      const summary = await createRelay(deps).run({ signal: abort.signal, timeLimitMs: 10_000 });
      expect(Date.now() - started).toBeLessThan(2000);
      expect(opened.every((nc) => nc.isClosed())).toBe(true);
      expect({ published: summary.published, onStream: (await readStream(nats().nc, stream)).length }).toEqual({ published: 0, onStream: 0 });
    });
  }
});
