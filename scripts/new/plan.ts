// A scaffold's changes, checked whole before anything is written: files to create (which must not exist yet),
// files to rewrite, and commands to run afterwards (e.g. `npm run db:generate -- <name>`).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { UsageError } from '../../src/entry/args.ts';

/** What a scaffold will do, relative to the repository root. */
export type Plan = {
  create: Map<string, string>;
  edit: Map<string, string>;
  run: string[][];
  /** Lines printed after the changes: what to do next. */
  next: string[];
};

/** An empty plan. */
export const createPlan = (): Plan => ({ create: new Map(), edit: new Map(), run: [], next: [] });

/** The current text of `path`, as already edited by `plan`. */
export function readPlanned(plan: Plan, path: string): string {
  return plan.edit.get(path) ?? plan.create.get(path) ?? readFileSync(path, 'utf8');
}

/** Refuses (UsageError, exit 2) when a file the plan creates already exists; nothing is written then. */
export function checkPlan(plan: Plan): void {
  const existing = [...plan.create.keys()].filter((p) => existsSync(p));
  if (existing.length > 0) throw new UsageError(`${existing.join(', ')} already exist${existing.length === 1 ? 's' : ''}; nothing was changed`);
}

/** Writes the plan's files, runs its commands (stopping at the first that fails) and prints what changed. */
export function applyPlan(plan: Plan): number {
  checkPlan(plan);
  for (const [path, text] of [...plan.create, ...plan.edit]) {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, text);
  }
  for (const path of plan.create.keys()) console.log(`created ${path}`);
  for (const path of plan.edit.keys()) console.log(`edited  ${path}`);
  for (const [cmd, ...args] of plan.run) {
    console.log(`running ${[cmd, ...args].join(' ')}`);
    const run = spawnSync(cmd!, args, { stdio: 'inherit' });
    if (run.status !== 0) {
      console.error(`${[cmd, ...args].join(' ')} failed; the files above were written, fix the cause and run it again`);
      return 1;
    }
  }
  if (plan.next.length > 0) console.log(`\nnext:\n${plan.next.map((l) => `  ${l}`).join('\n')}`);
  return 0;
}
