// Small, predictable edits of the files a scaffold extends (routes.ts, events.ts, src/modules.ts): each finds one
// anchor and inserts there, or throws EditError naming the file and the anchor it could not find.

/** The file does not have the shape the scaffold edits; nothing was written. */
export class EditError extends Error {
  override readonly name = 'EditError';
}

type ImportStatement = { start: number; end: number; from: string; text: string };

/** The import statements at the top of `lines` (each possibly spanning lines), in order. */
function importsOf(lines: string[]): ImportStatement[] {
  const out: ImportStatement[] = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i]!;
    if (line.startsWith('import ')) {
      let end = i;
      while (!/from '[^']+';\s*$/.test(lines[end]!) && !/^import '[^']+';\s*$/.test(lines[end]!) && end < lines.length - 1) end++;
      const text = lines.slice(i, end + 1).join('\n');
      out.push({ start: i, end, from: /'([^']+)';\s*$/.exec(lines[end]!)?.[1] ?? '', text });
      i = end + 1;
    } else if (line.trim() === '' || line.startsWith('//')) i++;
    else break;
  }
  return out;
}

/**
 * Adds `names` to the import from `from` (merging into an existing `import { … }` of the same kind, otherwise a new
 * statement placed in path order among the imports). `type` makes it `import type`.
 */
export function addImport(source: string, names: string[], from: string, options: { type?: boolean } = {}): string {
  const lines = source.split('\n');
  const imports = importsOf(lines);
  const kind = options.type ? 'import type {' : 'import {';
  const same = imports.find((s) => s.from === from && s.text.startsWith(kind));
  if (same) {
    const inner = /\{([^}]*)\}/s.exec(same.text)![1]!;
    const have = inner
      .split(',')
      .map((n) => n.trim())
      .filter(Boolean);
    const wanted = names.filter((n) => !have.includes(n) && !have.includes(`type ${n}`));
    if (wanted.length === 0) return source;
    const bare = (n: string) => n.replace(/^type /, '').toLowerCase();
    const merged = [...have, ...wanted].sort((a, b) => (bare(a) < bare(b) ? -1 : 1));
    lines.splice(same.start, same.end - same.start + 1, `${kind} ${merged.join(', ')} } from '${from}';`);
    return lines.join('\n');
  }
  const statement = `${kind} ${[...names].sort().join(', ')} } from '${from}';`;
  // package imports first, then relative ones, each group in path order
  const relative = (path: string) => path.startsWith('.');
  const group = imports.filter((s) => relative(s.from) === relative(from));
  const after = group.find((s) => s.from > from);
  const at = after
    ? after.start
    : group.length > 0
      ? group.at(-1)!.end + 1
      : relative(from) && imports.length > 0
        ? imports.at(-1)!.end + 1
        : (imports[0]?.start ?? firstCodeLine(lines));
  lines.splice(at, 0, statement);
  return lines.join('\n');
}

/** The first line after the file's leading comment block. */
function firstCodeLine(lines: string[]): number {
  let i = 0;
  while (i < lines.length && lines[i]!.startsWith('//')) i++;
  return i;
}

/** The index of the bracket closing the one at `open` (strings and comments are not expected inside). */
function matching(source: string, open: number): number {
  const pairs: Record<string, string> = { '(': ')', '[': ']', '{': '}' };
  const stack: string[] = [];
  for (let i = open; i < source.length; i++) {
    const ch = source[i]!;
    if (pairs[ch]) stack.push(pairs[ch]);
    else if (ch === stack.at(-1)) {
      stack.pop();
      if (stack.length === 0) return i;
    } else if (ch === "'" || ch === '"' || ch === '`') {
      const close = source.indexOf(ch, i + 1);
      if (close < 0) break;
      i = close;
    }
  }
  throw new EditError(`unbalanced brackets after position ${open}`);
}

/**
 * Appends `item` to the list that follows `anchor` (an array `[…]` or object `{…}` literal, e.g. `subscribers: [` or
 * `defineEvents({`), on one line as `[a, b, item]` or as a new last line when the list spans lines.
 */
export function appendToList(source: string, anchor: string, item: string, file: string): string {
  const at = source.indexOf(anchor);
  if (at < 0) throw new EditError(`${file}: cannot find ${JSON.stringify(anchor)}`);
  const open = at + anchor.length - 1;
  const close = matching(source, open);
  const inner = source.slice(open + 1, close);
  if (inner.includes('\n')) {
    const lineStart = source.lastIndexOf('\n', close - 1) + 1;
    const closeIndent = /^\s*/.exec(source.slice(lineStart, close))![0];
    const body = inner.replace(/\s+$/, '');
    const sep = body.trim() === '' || body.trimEnd().endsWith(',') ? '' : ',';
    return `${source.slice(0, open + 1)}${body}${sep}\n${closeIndent}  ${item},\n${closeIndent}${source.slice(close)}`;
  }
  const body = inner.trim();
  if (body === '' && source[open] === '{') {
    // an empty object literal grows one entry a line, like the catalogs it becomes
    const lineStart = source.lastIndexOf('\n', open) + 1;
    const indent = /^\s*/.exec(source.slice(lineStart))![0];
    return `${source.slice(0, open + 1)}\n${indent}  ${item},\n${indent}${source.slice(close)}`;
  }
  const pad = source[open] === '{' ? ' ' : '';
  const joined = body === '' ? item : `${body.replace(/,$/, '')}, ${item}`;
  return `${source.slice(0, open + 1)}${pad}${joined}${pad}${source.slice(close)}`;
}

/** Inserts `block` (lines) before the first line matching `anchor`, and before the doc comment just above it. */
export function insertBeforeDeclaration(source: string, anchor: RegExp, block: string, file: string): string {
  const lines = source.split('\n');
  let at = lines.findIndex((l) => anchor.test(l));
  if (at < 0) throw new EditError(`${file}: cannot find a line matching ${anchor}`);
  while (at > 0 && /^\s*(\/\*\*|\*|\/\/)/.test(lines[at - 1]!)) at--;
  lines.splice(at, 0, ...block.split('\n'), '');
  return lines.join('\n');
}
