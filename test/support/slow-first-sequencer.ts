import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The tiers in the order their files start: those that run real processes, clusters and long waits first, so that the
 * suite does not end with one of them running alone after every short file is done.
 */
const TIERS = ['chaos', 'e2e', 'hostile', 'int', 'runtime', 'example', 'ops', 'unit', 'template'];

/**
 * A file's tier: the folder under test/ it is in. A folder not listed (a team's own, such as test/contexts) starts
 * first, as vitest starts the files it knows nothing about: they may be slow.
 */
function tierOf(root: string, file: string): number {
  return TIERS.indexOf(relative(root, file).split(/[\\/]/)[1] ?? '');
}

/**
 * Runs the slowest files first, as a worker pool's schedule should. Within a tier, files that failed last time go
 * first, then the longer ones by the durations vitest kept from the last run here; on a clean clone, which has none,
 * the larger ones. The tier order comes first because a clean clone (CI) knows no durations, and file size says little
 * about how long a file waits on brokers and processes.
 */
export class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const { root } = this.ctx.config;
    const cache = this.ctx.cache;
    const keyOf = (f: TestSpecification) => `${f.project.name}:${relative(root, f.moduleId)}`;
    const rank = (f: TestSpecification) => {
      const key = keyOf(f);
      const last = cache.getFileTestResults(key);
      return { tier: tierOf(root, f.moduleId), failed: last?.failed ? 1 : 0, duration: last?.duration, size: cache.getFileStats(key)?.size ?? 0 };
    };
    const ranks = new Map(files.map((f) => [f, rank(f)]));
    return [...files].sort((a, b) => {
      const ra = ranks.get(a)!;
      const rb = ranks.get(b)!;
      if (ra.tier !== rb.tier) return ra.tier - rb.tier;
      if (ra.failed !== rb.failed) return rb.failed - ra.failed;
      if (ra.duration !== undefined && rb.duration !== undefined) return rb.duration - ra.duration;
      // a file without a duration (new, or a clean clone) counts as slow: it may be
      if (ra.duration !== undefined || rb.duration !== undefined) return ra.duration === undefined ? -1 : 1;
      return rb.size - ra.size;
    });
  }
}
