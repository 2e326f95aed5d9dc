// Configuration that named no lasting database or no address to listen on, refused in the processes that read it:
// exit 2 with one line naming the variable, before the service database is created (the checks of each value are
// in test/unit/config.unit.spec.ts). NATS_URL never points at a live broker.
import { existsSync } from 'node:fs';
import { runtimeCommand, runToExit } from '../support/process.ts';
import { describe, expect, it } from 'vitest';
import { useCliWorkspaces } from '../support/cli-workspace.ts';

const workspace = useCliWorkspaces();

describe('configuration refused before anything is opened', () => {
  it('refuses DATABASE_URL=file: (no file) with exit 2 instead of running on a database that vanishes with the process', async () => {
    const w = workspace();
    const r = await w.cli(['outbox:retry-failed', '--all'], { NATS_URL: 'nats://127.0.0.1:1', DATABASE_URL: 'file:' });
    expect({ code: r.code, names: r.stderr.includes('DATABASE_URL') }, `${r.stdout}${r.stderr}`).toEqual({ code: 2, names: true });
  });

  it('refuses a HOST that is no address or host name with exit 2 and one line naming HOST, before the database is created', async () => {
    const w = workspace();
    const { cmd, args } = runtimeCommand('node', 'src/entry/node.ts');
    const r = await runToExit(cmd, args, { ...w.env, ROLES: 'api', PORT: '0', HOST: 'not a host name!', NATS_URL: 'nats://127.0.0.1:1' }, 20_000);
    const db = w.env.DATABASE_URL.slice('file:'.length);
    expect({ code: r.code, names: /HOST/.test(r.stderr.split('\n')[0] ?? ''), created: existsSync(db) }, r.stderr.slice(0, 400)).toEqual({
      code: 2,
      names: true,
      created: false,
    });
  });
});
