// Checks on the identifiers and table names a scaffold generates: each must compile and be free where it is declared.
import { UsageError } from '../../src/entry/args.ts';

/** Words a JavaScript or TypeScript declaration cannot be named (reserved, strict-mode reserved, and type names). */
const RESERVED = new Set(
  (
    'break case catch class const continue debugger default delete do else enum export extends false finally for function if ' +
    'import in instanceof new null return super switch this throw true try typeof var void while with yield let static ' +
    'implements interface package private protected public await arguments eval undefined any boolean never number ' +
    'object string symbol unknown bigint'
  ).split(' '),
);

/**
 * Refuses (UsageError) `id` as the name of `what` when it is reserved or is one of `taken` (what the generated file
 * imports or declares besides it, or what the file being edited declares already).
 */
export function checkIdentifier(id: string, what: string, taken: Iterable<string> = []): void {
  if (RESERVED.has(id)) throw new UsageError(`${what} would be called ${id}, a reserved word; choose another name`);
  if (new Set(taken).has(id)) throw new UsageError(`${what} would be called ${id}, a name its file already uses; choose another name`);
}

/** The identifiers `source` declares or imports (a rough scan: const/let/var/function/class/type/interface/enum and import lists). */
export function declaredIn(source: string): Set<string> {
  const names = new Set<string>();
  for (const m of source.matchAll(/\b(?:const|let|var|function\*?|class|type|interface|enum)\s+([A-Za-z_$][\w$]*)/g)) names.add(m[1]!);
  for (const m of source.matchAll(/^import\s+(?:type\s+)?\{([^}]*)\}/gm)) {
    for (const part of m[1]!.split(',')) {
      const name = part
        .trim()
        .replace(/^type\s+/, '')
        .split(/\s+as\s+/)
        .at(-1)!
        .trim();
      if (name) names.add(name);
    }
  }
  for (const m of source.matchAll(/^import\s+(?:\*\s+as\s+)?([A-Za-z_$][\w$]*)\s/gm)) if (m[1] !== 'type') names.add(m[1]!);
  return names;
}

/** Refuses (UsageError) a table name SQLite reserves (`sqlite_…`) or one of `reserved` (the core's tables). */
export function checkTable(table: string, reserved: string[], option: string): void {
  if (!/^[a-z][a-z0-9_]*$/.test(table) || reserved.includes(table))
    throw new UsageError(`${option} ${JSON.stringify(table)} must be a snake_case name other than ${reserved.join(', ')}`);
  if (table.startsWith('sqlite_')) throw new UsageError(`${option} ${JSON.stringify(table)}: SQLite reserves the names starting with sqlite_`);
}
