// `npm run new -- rename <service-name>`: the service's name, everywhere the repository spells it. The one setting is
// DEFAULT_SERVICE_NAME in src/service-name.ts; the same name in package.json, wrangler.toml, compose.yaml, the docs
// and the tests that assert the defaults (stream, subjects, durable consumers) follows it, so the suite stays green.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { UsageError } from '../../src/entry/args.ts';
import { KEBAB } from './names.ts';
import { createPlan, readPlanned, type Plan } from './plan.ts';
import { otherUses } from './rename-check.ts';

const SERVICE_NAME_FILE = 'src/service-name.ts';

/** Folders that are not the project's own text: dependencies, builds, local data. */
const SKIPPED = new Set(['node_modules', '.git', 'dist', 'data', 'coverage', '.wrangler']);

/** The repository's files: what git tracks or would add (not ignored), or every file outside SKIPPED without git. */
function repositoryFiles(): string[] {
  if (existsSync('.git')) {
    return execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], { encoding: 'utf8' })
      .split('\0')
      .filter((f) => f && existsSync(f));
  }
  const walk = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
      if (SKIPPED.has(d.name)) return [];
      const path = dir === '.' ? d.name : join(dir, d.name);
      return d.isDirectory() ? walk(path) : d.isFile() ? [path] : [];
    });
  return walk('.');
}

/** The name in `src/service-name.ts` now. */
function currentName(): string {
  const found = /DEFAULT_SERVICE_NAME = '([^']+)'/.exec(readFileSync(SERVICE_NAME_FILE, 'utf8'));
  if (!found) throw new UsageError(`${SERVICE_NAME_FILE} has no DEFAULT_SERVICE_NAME = '…' to rename`);
  return found[1]!;
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** The stream-name spelling of a service name: upper case, `-` as `_` (as streamNameOf does). */
const upper = (name: string) => name.toUpperCase().replace(/[^A-Z0-9_]/g, '_');

/**
 * Plans the rename from the current name to `name` in every text file of the repository: the whole name (also as the
 * start of `<name>-<subscriber>`, `<name>.>` or `<name>:latest`) and its stream spelling, never part of a longer
 * word (`my-<name>`, the tests' `<STREAM>_TEST_FAULT` variable). UsageError for a name that is not kebab-case or unchanged,
 * and when the current name also spells something else (an ordinary word such as `orders`): see rename-check.ts.
 */
export function planRename(name: string): Plan {
  if (!KEBAB.test(name))
    throw new UsageError(`service name ${JSON.stringify(name)} must be kebab-case (acme-shipping): it becomes the stream, subjects and consumer names`);
  const from = currentName();
  if (from === name) throw new UsageError(`the service is called ${name} already`);
  const lower = new RegExp(`(?<![\\w-])${escape(from)}(?!\\w)`, 'g');
  const stream = new RegExp(`(?<!\\w)${escape(upper(from))}(?!\\w)`, 'g');
  const plan = createPlan();
  const others: string[] = [];
  for (const file of repositoryFiles()) {
    if (statSync(file).size > 8 * 1024 * 1024) continue;
    const before = readPlanned(plan, file);
    if (before.includes('\0')) continue; // binary
    others.push(...otherUses(file, before, from));
    const after = before.replace(lower, name).replace(stream, upper(name));
    if (after !== before) plan.edit.set(file, after);
  }
  if (others.length > 0) {
    others.sort((a, b) => Number(a.includes('.md:')) - Number(b.includes('.md:'))); // code first, then the docs
    const shown = others.slice(0, 12).map((o) => `  ${o}`);
    if (others.length > shown.length) shown.push(`  … and ${others.length - shown.length} more`);
    throw new UsageError(
      `the current name ${from} also names other things (a route, a path, a table or a value), which a rename would change too:\n${shown.join('\n')}\nchange DEFAULT_SERVICE_NAME in ${SERVICE_NAME_FILE} and the files that spell the service's name by hand`,
    );
  }
  plan.next.push(
    `the stream is now ${upper(name)} (subjects ${name}.>) and durable consumers ${name}-<subscriber>: a deployed service keeps its old ones by setting NATS_STREAM, EVENTS_SUBJECT_PREFIX and SERVICE_NAME`,
  );
  return plan;
}
