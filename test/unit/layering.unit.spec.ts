import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = resolve(import.meta.dirname, '../../src');

/** The example and the composition: everything else under src/ (but the entries) is the core a clone keeps. */
const NOT_CORE = [/^contexts\//, /^subscribers\//, /^modules\.ts$/, /^entry\//];

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? filesUnder(join(dir, d.name)) : d.name.endsWith('.ts') ? [join(dir, d.name)] : [],
  );
}

/** The module specifiers a file imports or re-exports (static and dynamic). */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g)].map((m) => m[1] ?? m[2]!);
}

const core = filesUnder(SRC)
  .map((f) => relative(SRC, f))
  .filter((f) => !NOT_CORE.some((re) => re.test(f)));

describe('layering - the core stands apart from the example', () => {
  it('finds the core files it checks', () => {
    expect(core.length).toBeGreaterThan(30);
    expect(core).toContain('outbox/relay.ts');
  });

  it('no core file imports a context, a subscriber, the composition or an entry', () => {
    const offending = core.flatMap((f) =>
      importsOf(join(SRC, f))
        .filter((spec) => spec.startsWith('.'))
        .map((spec) => relative(SRC, resolve(dirname(join(SRC, f)), spec)))
        .filter((target) => NOT_CORE.some((re) => re.test(target)))
        .map((target) => `${f} → ${target}`),
    );
    expect(offending).toEqual([]);
  });

  it('no core file imports a node:* module, so the core runs on Workers', () => {
    const offending = core.flatMap((f) =>
      importsOf(join(SRC, f))
        .filter((spec) => spec.startsWith('node:'))
        .map((spec) => `${f} → ${spec}`),
    );
    expect(offending).toEqual([]);
  });

  it('subscribers import no producer code: only the core and the composition (for the event types)', () => {
    const subscriberFiles = filesUnder(join(SRC, 'subscribers')).map((f) => relative(SRC, f));
    const offending = subscriberFiles.flatMap((f) =>
      importsOf(join(SRC, f))
        .filter((spec) => spec.startsWith('.'))
        .map((spec) => relative(SRC, resolve(dirname(join(SRC, f)), spec)))
        .filter((target) => target.startsWith('contexts/'))
        .map((target) => `${f} → ${target}`),
    );
    expect(offending).toEqual([]);
  });
});

describe('layering - the core is tested without the example', () => {
  const TEST = resolve(import.meta.dirname, '..');
  const ROOT = resolve(TEST, '..');
  /** The example's code and its tests: what the core's tests (test/unit, test/int, the kit in test/support) must not need. */
  const EXAMPLE = [/^src\/contexts\//, /^src\/subscribers\//, /^src\/modules\.ts$/, /^test\/example\//];
  const coreTests = ['unit', 'int', 'support']
    .flatMap((d) => filesUnder(join(TEST, d)))
    .filter((f) => !/^example-[^/]*\.ts$/.test(relative(join(TEST, 'support'), f)));

  it('finds the test files it checks, the fixture among them', () => {
    expect(coreTests.map((f) => relative(ROOT, f))).toEqual(expect.arrayContaining(['test/int/relay.int.spec.ts', 'test/support/fixture/modules.ts']));
  });

  it('no core test or test helper imports the example context, its subscribers, the composition or the example tests', () => {
    const offending = coreTests.flatMap((f) =>
      importsOf(f)
        .filter((spec) => spec.startsWith('.'))
        .map((spec) => relative(ROOT, resolve(dirname(f), spec)))
        .filter((target) => EXAMPLE.some((re) => re.test(target)))
        .map((target) => `${relative(ROOT, f)} → ${target}`),
    );
    expect(offending).toEqual([]);
  });
});
