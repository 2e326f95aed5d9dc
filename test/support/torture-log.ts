import { onTestFailed } from 'vitest';

/**
 * A log for a torture run inside a test: silent while the test passes; when it fails or times out, its last `max`
 * lines are printed, each with the seconds since the log was made, so a hung phase shows where it hung.
 */
export function logShownOnFailure(max = 400): (line: string) => void {
  const lines: string[] = [];
  const start = Date.now();
  onTestFailed(() => console.log(`torture log, last ${lines.length} lines:\n${lines.join('\n')}`));
  return (line) => {
    lines.push(`+${((Date.now() - start) / 1000).toFixed(1)}s ${line}`);
    if (lines.length > max) lines.shift();
  };
}
