import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { ROOT } from './process.ts';

/** Another process that can hold the SQLite write lock of a database (BEGIN IMMEDIATE) for as long as a test wants. */
export type WriteLockHolder = {
  /** Resolves once the other process holds the write lock. */
  lock(): Promise<void>;
  /** Resolves once it rolled back and let go. */
  release(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
};

/** Starts the holder process on the database at `url` (a `file:` URL); it holds nothing until `lock()`. */
export async function startWriteLockHolder(url: string): Promise<WriteLockHolder> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/support/hold-write-lock.ts', url], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const expect = async (want: string) => {
    const { value, done } = await lines.next();
    if (done || value !== want) throw new Error(`write-lock holder answered ${done ? 'nothing (it exited)' : value}, expected ${want}`);
  };
  const send = async (command: string, want: string) => {
    child.stdin!.write(`${command}\n`);
    await expect(want);
  };
  await expect('ready');
  return {
    lock: () => send('lock', 'locked'),
    release: () => send('release', 'released'),
    async [Symbol.asyncDispose]() {
      child.stdin!.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}
