/**
 * A log line writer for Node-compatible runtimes: the lines of one event-loop turn go to stdout in one console.log
 * (one write), in order, at the end of the turn, and whatever is pending when the process exits (`process.exit`
 * included) is written then. A busy server ends dozens of requests in one turn, each with its access line, and a
 * synchronous write per line cost more than rendering it. A SIGKILL loses at most the current turn's lines.
 */
export function createStdoutLines(): (line: string) => void {
  let pending: string[] = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (pending.length === 0) return;
    const lines = pending;
    pending = [];
    console.log(lines.join('\n'));
  };
  process.on('exit', flush);
  return (line) => {
    pending.push(line);
    if (scheduled) return;
    scheduled = true;
    setImmediate(flush);
  };
}
