import { defineConfig } from 'vitest/config';

// Every suite, by tier folder (npm run test:<tier> runs one): test/unit, test/int (the core, on the fixture in
// test/support/fixture), test/e2e and test/runtime (real processes), test/example (the example context and
// subscribers; deleted with them).
export default defineConfig({
  test: {
    include: ['test/**/*.spec.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    fileParallelism: true,
    maxWorkers: 2,
  },
});
