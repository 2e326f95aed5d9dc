// The template's promise: delete the example (its context, its subscribers, its tests and its lines in
// src/modules.ts) and what is left, the core, typechecks and passes its unit and integration tests, which run on
// the fixture in test/support. Checked on a copy of the working tree.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runGroupToExit } from '../support/process-group.ts';
import { copyRepository } from '../support/repository-copy.ts';

/** What deleting the example removes. */
const EXAMPLE = ['src/contexts/orders', 'src/subscribers/reporting', 'src/subscribers/notifications', 'test/example'];
/** Not core, and written against the example: the benchmarks measure its commands and subscribers. */
const ALSO_REMOVED = ['bench'];

/** src/modules.ts without the example's lines: no context or subscriber imported, an empty catalog and empty lists. */
export function withoutExample(source: string): string {
  return source
    .replace(/^import [^\n]*'\.\/(contexts|subscribers)\/[^\n]*\n/gm, '')
    .replace(/defineEvents\(\{[^}]*\}\)/, 'defineEvents({})')
    .replace(/contexts: \[[^\]]*\]/, 'contexts: []')
    .replace(/subscribers: \[[^\]]*\]/, 'subscribers: []');
}

let copy: ReturnType<typeof copyRepository>;
beforeAll(() => {
  copy = copyRepository('hono-core-only-');
  for (const path of [...EXAMPLE, ...ALSO_REMOVED]) rmSync(join(copy.dir, path), { recursive: true, force: true });
  const modulesTs = join(copy.dir, 'src/modules.ts');
  writeFileSync(modulesTs, withoutExample(readFileSync(modulesTs, 'utf8')));
});
afterAll(() => copy?.[Symbol.dispose]());

describe('template - the core without the example', () => {
  it('the composition is left empty: defineEvents({}), no contexts, no subscribers, nothing of the example imported', () => {
    const modulesTs = readFileSync(join(copy.dir, 'src/modules.ts'), 'utf8');
    expect(modulesTs).toMatch(/defineEvents\(\{\}\)/);
    expect(modulesTs).toMatch(/contexts: \[\]/);
    expect(modulesTs).toMatch(/subscribers: \[\]/);
    expect(modulesTs).not.toMatch(/orders|reporting|notifications/);
  });

  it('typechecks (npx tsc -p .)', async () => {
    const r = await runGroupToExit('npx', ['tsc', '-p', '.'], {}, { cwd: copy.dir, timeoutMs: 180_000 });
    expect(r.code, r.output).toBe(0);
  }, 200_000);

  it('passes its unit and integration tests (npx vitest run test/unit test/int)', async () => {
    // one worker: this file's own run keeps others busy, and the timing-bound suites need a core to themselves
    // foreign-lock's liveness bounds are about timing, not layout: it runs in the main suite, not in a copy that
    // shares the cores with it
    const r = await runGroupToExit(
      'npx',
      ['vitest', 'run', '--maxWorkers=1', '--exclude', 'test/int/foreign-lock.int.spec.ts', 'test/unit', 'test/int'],
      { TEMPLATE_TESTS: '' }, // the copy's own default suite, not this tier
      { cwd: copy.dir, timeoutMs: 900_000 },
    );
    expect(r.code, r.output.slice(-20_000)).toBe(0);
    // every test file ran and passed (none skipped or failed), the fixture's suites among them
    const [, passed, total] = /Test Files\s+(\d+) passed \((\d+)\)/.exec(r.output) ?? [];
    expect(Number(passed)).toBeGreaterThan(15);
    expect(passed).toBe(total);
    expect(r.output).toMatch(/test\/int\/relay\.int\.spec\.ts/);
  }, 920_000);
});
