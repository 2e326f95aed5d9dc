import { configDefaults, defineConfig } from 'vitest/config';

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
    // two files at a time left the machine ~60 % idle (7 min); three keep it busier (5 min then; 6–7 min with the stop tests added since).
    maxWorkers: 3,
  },
});
