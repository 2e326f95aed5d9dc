import { configDefaults, defineConfig } from 'vitest/config';
import { SlowFirstSequencer } from './test/support/slow-first-sequencer.ts';

// Every suite, by tier folder (npm run test:<tier> runs one): test/unit, test/int (the core, on the fixture in
// test/support/fixture), test/e2e and test/runtime (real processes), test/example (the example context and
// subscribers; deleted with them), test/ops (promtool), test/hostile (hostile input and failures).
// Two tiers stay out of `npm test` for their minutes, and CI runs both after it:
// test/chaos (the torture runs, outages and hold-backs that wait out ack_waits and leases on purpose) only with
// CHAOS_TESTS=1 — `npm run test:chaos`;
// test/template (the core without the example, the scaffolds and a rename, each running the suites again in a copy
// of the repository) only with TEMPLATE_TESTS=1 — `npm run test:template`.
const tier = process.env.TEMPLATE_TESTS === '1' ? 'template' : process.env.CHAOS_TESTS === '1' ? 'chaos' : undefined;

export default defineConfig({
  test: {
    include: tier ? [`test/${tier}/**/*.spec.ts`] : ['test/**/*.spec.ts'],
    exclude: tier ? configDefaults.exclude : [...configDefaults.exclude, 'test/template/**', 'test/chaos/**'],
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
