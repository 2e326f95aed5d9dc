import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, symlinkSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createTempDir } from './db.ts';
import { ROOT } from './process.ts';

/**
 * The working tree (tracked and new files, not ignored ones; files deleted in the tree left out) copied to a temp
 * dir with node_modules linked, for tests that change the project itself; dispose removes the copy.
 */
export function copyRepository(prefix = 'hono-outbox-copy-'): { dir: string; [Symbol.dispose](): void } {
  const tmp = createTempDir(prefix);
  const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], { cwd: ROOT, encoding: 'utf8' })
    .split('\0')
    .filter(Boolean);
  for (const file of files) {
    if (!existsSync(join(ROOT, file))) continue;
    mkdirSync(dirname(join(tmp.dir, file)), { recursive: true });
    cpSync(join(ROOT, file), join(tmp.dir, file));
  }
  symlinkSync(join(ROOT, 'node_modules'), join(tmp.dir, 'node_modules'));
  return tmp;
}
