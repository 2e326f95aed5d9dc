// SQLite allows no trigger on sqlite_sequence, so a script can set the outbox's AUTOINCREMENT counter past 2^53: the
// next command then fails as a whole ("outbox seq out of range", migration 0009_outbox_seq_range), and the pages an
// operator looks at meanwhile must still answer: the stats read that counter through a guard (falling back to the
// highest seq stored). Real libSQL file, real nats-server.
import { describe, expect, it } from 'vitest';
import { accountCommands } from '../support/accounts.ts';
import { createTestService } from '../support/service.ts';
import { freshStream, streamEnv } from '../support/stream.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

describe('outbox stats - the AUTOINCREMENT counter set past 2^53 in sqlite_sequence', () => {
  it('/outbox/stats and /status.json answer 200 and /metrics still carries the backlog gauges', async () => {
    const stream = await freshStream(nats().nc, 'SEQCTR');
    await using s = await createTestService({ ROLES: 'api', NATS_URL: nats().url, ...streamEnv(stream) });
    await accountCommands(s.deps).openMany(2);
    await s.client.execute({ sql: "UPDATE sqlite_sequence SET seq = ? WHERE name = 'outbox'", args: [2n ** 60n] });

    const stats = await s.app.request('/outbox/stats');
    expect(stats.status, await stats.clone().text()).toBe(200);
    expect(await stats.json()).toMatchObject({ pending: 2, failed: 0 });
    const status = await s.app.request('/status.json');
    expect(status.status, await status.text()).toBe(200);
    const metrics = await (await s.app.request('/metrics')).text();
    expect(metrics).toMatch(/^outbox_pending_messages(\{[^}]*\})? 2$/m);
  });
});
