import { configDefaults, defineConfig } from 'vitest/config';
import { SlowFirstSequencer } from './test/support/slow-first-sequencer.ts';

// Every suite, by tier folder (npm run test:<tier> runs one): test/unit, test/int (the core, on the fixture in
// test/support/fixture), test/e2e and test/runtime (real processes), test/example (the example context and
// subscribers; deleted with them), test/ops (promtool), test/hostile (hostile input and failures).
// test/template (the core without the example, the scaffolds and a rename, each running the suites again in a copy
// of the repository: minutes) runs only with TEMPLATE_TESTS=1 — `npm run test:template`, which CI runs after `npm test`.
const template = process.env.TEMPLATE_TESTS === '1';

export default defineConfig({
  test: {
    include: template ? ['test/template/**/*.spec.ts'] : ['test/**/*.spec.ts'],
    exclude: template ? configDefaults.exclude : [...configDefaults.exclude, 'test/template/**'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    fileParallelism: true,
    // Most test files spend their time waiting on brokers, leases and ack waits rather than computing: on two cores,
    // three files at a time took 7.4 min, four take 6.2 (the machine is then busy most of the run, not idle half of it).
    maxWorkers: 4,
    // The slow tiers start first (see the sequencer). In vitest's own order a clean clone, which knows no durations,
    // starts the larger files first, and the two-minute torture file, a small one, started after five minutes.
    sequence: { sequencer: SlowFirstSequencer },
  },
});
