import { connect } from '@nats-io/transport-node';
import { parseConfig } from '../../src/config.ts';
import { silentLogger } from '../../src/logger.ts';
import { natsConnectionOptions } from '../../src/nats/connect.ts';
import { createService, type ServiceIo } from '../../src/service.ts';
import { createTestDb, type TestDbOptions } from './db.ts';
import { fixtureModules } from './fixture/modules.ts';

/**
 * A service wired by createService over a fresh test database (`await using s = await createTestService(env)`): the
 * fixture's unless `io.modules` (with `options.migrations`) name another composition. `env` is parsed as the entries
 * parse it, with fast relay back-off; `io` replaces any part.
 */
export async function createTestService(env: Record<string, string>, io: Partial<ServiceIo> = {}, options: Pick<TestDbOptions, 'migrations'> = {}) {
  const modules = io.modules ?? fixtureModules;
  const t = await createTestDb({ modules, ...options });
  const config = parseConfig({ RELAY_BACKOFF_BASE_MS: '20', RELAY_MAX_BACKOFF_MS: '200', RELAY_POLL_MS: '20', RELAY_PUBLISH_TIMEOUT_MS: '500', ...env });
  const service = await createService(config, {
    modules,
    client: t.client,
    log: silentLogger,
    connect: () => connect(natsConnectionOptions({ servers: config.NATS_URL.split(','), name: 'test service' })),
    ...io,
  });
  const close = async () => {
    await service.stop();
    t.close();
  };
  return { ...t, config, service, app: service.app, close, [Symbol.asyncDispose]: close };
}
