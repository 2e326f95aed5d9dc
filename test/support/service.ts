import { connect } from '@nats-io/transport-node';
import { parseConfig } from '../../src/config.ts';
import { silentLogger } from '../../src/logger.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import { createService, type ServiceIo } from '../../src/service.ts';
import { createTestDb } from './db.ts';

/** The whole service wired by createService over a fresh test database; `env` is parsed as the entries parse it. */
export async function createTestService(env: Record<string, string>, io: Partial<ServiceIo> = {}) {
  const t = await createTestDb();
  const config = parseConfig({ RELAY_BACKOFF_BASE_MS: '20', RELAY_MAX_BACKOFF_MS: '200', RELAY_POLL_MS: '20', RELAY_PUBLISH_TIMEOUT_MS: '500', ...env });
  const service = await createService(config, {
    client: t.client,
    log: silentLogger,
    connect: () => connect(natsConnectionOptions({ servers: config.NATS_URL.split(','), name: 'test service' })),
    ...io,
  });
  return {
    ...t,
    config,
    service,
    app: service.app,
    async close() {
      await service.stop();
      t.close();
    },
  };
}

/** Polls `check` until it returns a truthy value or `timeoutMs` passes (then returns the last value). */
export async function eventually<T>(check: () => Promise<T>, timeoutMs = 15_000, everyMs = 25): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value || Date.now() > until) return value;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export const json = (body: unknown, headers: Record<string, string> = {}) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});
