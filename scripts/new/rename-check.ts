// Where a service name that is also an ordinary word (`orders`, `shop`) names something else: a rename replacing every
// whole-word occurrence would change routes, tables, import paths and values with it, so `rename` refuses then.

/** `s` matched literally in a regular expression. */
const literally = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Files whose text is code, where a bare word outside strings and comments is an identifier. */
const CODE = /\.(?:[cm]?[jt]sx?)$/;

/** Whether `at` in `line` is outside any string and comment (a line-local scan: quotes, `//`, a `*` comment line). */
function inCode(line: string, at: number): boolean {
  if (/^\s*(?:\*|\/\*)/.test(line)) return false;
  let quote: string | undefined;
  for (let i = 0; i < at; i++) {
    const ch = line[i]!;
    if (quote) {
      if (ch === '\\') i++;
      else if (ch === quote) quote = undefined;
    } else if (ch === '/' && line[i + 1] === '/') return false;
    else if (ch === "'" || ch === '"' || ch === '`') quote = ch;
  }
  return quote === undefined;
}

/** Why the occurrence of `name` at `at` in `line` names something other than the service, or undefined. */
function otherUse(file: string, line: string, at: number, name: string): string | undefined {
  const before = line.slice(0, at);
  const after = line.slice(at + name.length);
  if (after.startsWith('/') || (before.endsWith('/') && !after.startsWith(':'))) return 'a path or route segment';
  if (/\b(?:FROM|INTO|UPDATE|TABLE|JOIN|EXISTS)\s+[`"]?$/.test(before)) return 'a table';
  if (file.endsWith('.sql') && before.endsWith('`') && after.startsWith('`')) return 'a table';
  if (CODE.test(file) && /^[A-Za-z_$][\w$]*$/.test(name) && inCode(line, at)) return 'a value';
  return undefined;
}

/** `file:line (why)` for each whole-word occurrence of `name` in `text` that names something other than the service. */
export function otherUses(file: string, text: string, name: string): string[] {
  const word = new RegExp(`(?<![\\w-])${literally(name)}(?!\\w)`, 'g');
  const found: string[] = [];
  text.split('\n').forEach((line, i) => {
    for (const m of line.matchAll(word)) {
      const why = otherUse(file, line, m.index, name);
      if (why) found.push(`${file}:${i + 1} (${why})`);
    }
  });
  return found;
}
