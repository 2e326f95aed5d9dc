// npm run bench [-- --quick] [--only relay,commands,lag,cleanup,consume,outage,memory]   (--only keeps the others' last results)
// Runs every bench:* script of package.json one after the other (relay, commands, lag, cleanup, then consume and any
// other bench:* present), each bounded by a time limit, collects the JSON each one saved ("results: <file>" on
// its stdout), writes bench/results/<timestamp>.json (git-ignored) and bench/latest.json (the committed summary),
// and redraws bench/benchmarks.svg, then prints the Markdown tables for BENCHMARKS.md (`--markdown <summary.json>`
// prints them for an earlier run). --quick passes short durations to every bench: a validation run, not figures.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { childEnv, ROOT } from '../test/support/process.ts';
import { writeChart } from './chart.ts';
import { stringArg } from './variants/launch.ts';
import { describeMachine } from './variants/machine.ts';
import { renderMarkdown } from './variants/markdown.ts';

const QUICK = process.argv.includes('--quick');
const ONLY = stringArg('only', '');
const ORDER = ['relay', 'commands', 'lag', 'cleanup', 'consume', 'outage', 'memory'];
/** Tools for a closer look (a profile, a micro-benchmark), not part of the suite's summary. */
const DIAGNOSTICS = ['budget', 'statement-cache'];
const QUICK_ARGS: Record<string, string[]> = {
  relay: ['--rows', '5000', '--sizes', '0'],
  outage: ['--quick'],
  memory: ['--quick'],
  commands: ['--seconds', '3', '--warmup', '1'],
  lag: ['--seconds', '5', '--warmup', '1'],
  cleanup: ['--idle-seconds', '5', '--warmup', '1'],
  consume: ['--events', '5000', '--rounds', '1'],
};
const LIMIT_MS = QUICK ? 8 * 60_000 : 30 * 60_000;

/** Runs `npm run bench:<name>` in its own process group, echoing its output; resolves with the saved result file, if any. */
function runScript(name: string, args: string[]): Promise<{ file?: string; code: number | null; timedOut: boolean }> {
  return new Promise((resolve) => {
    const npmArgs = ['run', '--silent', `bench:${name}`, ...(args.length ? ['--', ...args] : [])];
    console.log(`\n=== npm ${npmArgs.join(' ')}`);
    const proc = spawn('npm', npmArgs, { cwd: ROOT, env: childEnv(), stdio: ['ignore', 'pipe', 'inherit'], detached: true });
    let file: string | undefined;
    let timedOut = false;
    proc.stdout!.setEncoding('utf8').on('data', (d: string) => {
      process.stdout.write(d);
      const m = /^results: (.+\.json)\s*$/m.exec(d);
      if (m) file = m[1];
    });
    const timer = setTimeout(() => {
      timedOut = true;
      console.log(`=== bench:${name} exceeded ${LIMIT_MS / 60_000} min: stopping it`);
      try {
        process.kill(-proc.pid!, 'SIGTERM');
        setTimeout(() => {
          try {
            process.kill(-proc.pid!, 'SIGKILL');
          } catch {
            // already gone
          }
        }, 10_000).unref();
      } catch {
        // already gone
      }
    }, LIMIT_MS);
    proc.once('close', (code) => {
      clearTimeout(timer);
      resolve({ ...(file ? { file } : {}), code, timedOut });
    });
  });
}

async function main() {
  const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
  const present = Object.keys(scripts)
    .filter((s) => s.startsWith('bench:'))
    .map((s) => s.slice('bench:'.length))
    .filter((n) => !DIAGNOSTICS.includes(n));
  const names = [...ORDER.filter((n) => present.includes(n)), ...present.filter((n) => !ORDER.includes(n)).sort()].filter(
    (n) => !ONLY || ONLY.split(',').includes(n),
  );
  const startedAt = new Date().toISOString();
  const results: Record<string, unknown> = {};
  for (const name of names) {
    const run = await runScript(name, QUICK ? (QUICK_ARGS[name] ?? []) : []);
    results[name] = run.file
      ? JSON.parse(readFileSync(run.file, 'utf8'))
      : { error: run.timedOut ? `stopped after ${LIMIT_MS / 60_000} min` : `exited with ${run.code} without saving a result` };
  }
  const latest = join(import.meta.dirname, 'latest.json');
  // with --only, the other benchmarks' results of the previous summary are kept
  const previous = ONLY && existsSync(latest) ? (JSON.parse(readFileSync(latest, 'utf8')) as { results?: Record<string, unknown> }).results : undefined;
  const summary = {
    startedAt,
    finishedAt: new Date().toISOString(),
    quick: QUICK,
    scripts: names,
    machine: await describeMachine(),
    results: { ...previous, ...results },
  };
  const dir = join(import.meta.dirname, 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${startedAt.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(summary, null, 2));
  writeFileSync(latest, JSON.stringify(summary, null, 2));
  console.log(`\nall results: ${file}\nsummary:     ${latest}\nchart:       ${writeChart(latest)}\n\n${renderMarkdown(summary)}`);
}

// `--markdown <summary.json>` only prints the tables of an earlier run
const markdownOf = stringArg('markdown', '');
if (markdownOf) console.log(renderMarkdown(JSON.parse(readFileSync(markdownOf, 'utf8'))));
else await main();
