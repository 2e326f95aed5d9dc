// What a result was measured on: CPU, OS and the versions of everything in the path.
import { createClient } from '@libsql/client';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, release, totalmem } from 'node:os';
import { join } from 'node:path';
import { NATS_SERVER_BIN } from '../../test/support/nats.ts';
import { ROOT } from '../../test/support/process.ts';

const firstLine = (cmd: string, args: string[]) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 10_000 });
  return (r.stdout || r.stderr || '').split('\n')[0]!.trim() || 'unavailable';
};
const pkgVersion = (name: string) => {
  try {
    return (JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    return 'not installed';
  }
};

/** A description of this machine and the versions in the measured path. */
export async function describeMachine() {
  const client = createClient({ url: ':memory:' });
  const sqlite = String((await client.execute('SELECT sqlite_version()')).rows[0]![0]);
  client.close();
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryGiB: Math.round(totalmem() / 1024 ** 3),
    kernel: release(),
    node: process.version,
    bun: firstLine(join(ROOT, 'node_modules/.bin/bun'), ['--version']),
    deno: firstLine(join(ROOT, 'node_modules/deno/deno'), ['--version']),
    natsServer: firstLine(NATS_SERVER_BIN, ['--version']),
    libsqlClient: pkgVersion('@libsql/client'),
    sqlite,
    hono: pkgVersion('hono'),
    natsJs: pkgVersion('@nats-io/jetstream'),
    autocannon: pkgVersion('autocannon'),
  };
}
