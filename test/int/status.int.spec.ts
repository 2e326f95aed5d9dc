// /status.json is public: the recent errors' details, which can quote event data, go only to the admin token.
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/logger.ts';
import { createStatusRoutes } from '../../src/ops/status.routes.ts';
import { recordRecentLogs } from '../../src/recent-logs.ts';
import { createTestDb } from '../support/db.ts';

const TOKEN = 'status-test-admin-token';

describe('status - recent errors on the public status', () => {
  it('shows the time, level and message of a recent error to everyone, and its fields only with the admin token', async () => {
    await using t = await createTestDb();
    const { log, recent } = recordRecentLogs(silentLogger);
    log.warn('consumer: message dead-lettered', { consumer: 'audit', error: 'Failed query: insert … params: Jane Doe, 123-45-6789' });
    const app = createStatusRoutes({ service: 'test', db: t.deps.db, clock: t.deps.clock, admin: true, adminToken: TOKEN, recentLogs: recent });

    const anonymous = (await (await app.request('/status.json')).json()) as { errors: Array<{ msg: string; fields: Record<string, string> }> };
    expect(anonymous.errors).toEqual([expect.objectContaining({ msg: 'consumer: message dead-lettered', fields: {} })]);
    expect(JSON.stringify(anonymous)).not.toContain('Jane Doe');

    const wrong = (await (await app.request('/status.json', { headers: { Authorization: 'Bearer not-the-token-at-all' } })).json()) as typeof anonymous;
    expect(JSON.stringify(wrong)).not.toContain('Jane Doe');

    const admin = (await (await app.request('/status.json', { headers: { Authorization: `Bearer ${TOKEN}` } })).json()) as typeof anonymous;
    expect(admin.errors[0]!.fields).toMatchObject({ consumer: 'audit' });
    expect(JSON.stringify(admin)).toContain('Jane Doe');
  });
});
