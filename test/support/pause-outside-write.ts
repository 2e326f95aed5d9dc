import { createClient } from '@libsql/client';
import { freeze, type ChildHandle } from './process.ts';

/**
 * SIGSTOPs `child` at a moment it holds no write transaction on `dbUrl`. A process frozen inside one keeps SQLite's
 * write lock, and then no other process can write at all (no lease renewal, no command) until it runs again: leases
 * cannot help there, so tests that freeze a process past its lease pause it outside its writes, probing the lock
 * while it is stopped.
 */
export async function pauseOutsideAWrite(child: Pick<ChildHandle, 'proc'>, dbUrl: string): Promise<void> {
  const probe = createClient({ url: dbUrl, timeout: 300 });
  try {
    for (let attempt = 0; attempt < 50; attempt++) {
      await freeze(child.proc.pid!);
      try {
        await probe.executeMultiple('BEGIN IMMEDIATE; ROLLBACK');
        return;
      } catch {
        child.proc.kill('SIGCONT'); // stopped inside a write (or the lock was busy for 300 ms): try another moment
        await new Promise((r) => setTimeout(r, 20 + Math.random() * 30));
      }
    }
    throw new Error('could not pause the process outside a write transaction');
  } finally {
    probe.close();
  }
}
