// `--fields carrier:string,trackingNumber:string,weightGrams?:int`: the fields of a command's body and of its event.
import { UsageError } from '../../src/entry/args.ts';

const TYPES = ['string', 'int', 'number', 'boolean'] as const;

/** One field: its name (camelCase), its type and whether it may be left out. */
export type Field = { name: string; type: (typeof TYPES)[number]; optional: boolean };

/** Parses `name[?][:type],…` (type defaults to string); UsageError for a bad name, type or a repeated field. */
export function parseFields(spec: string | undefined): Field[] {
  if (spec === undefined || spec.trim() === '') return [];
  const fields = spec.split(',').map((part): Field => {
    const [rawName = '', type = 'string', ...extra] = part.trim().split(':');
    if (extra.length > 0) throw new UsageError(`--fields: ${JSON.stringify(part.trim())} has more than a name and a type (name[?]:type)`);
    const optional = rawName.endsWith('?');
    const name = optional ? rawName.slice(0, -1) : rawName;
    if (!/^[a-z][A-Za-z0-9]*$/.test(name)) throw new UsageError(`--fields: ${JSON.stringify(name)} is not a camelCase field name`);
    if (!(TYPES as readonly string[]).includes(type)) throw new UsageError(`--fields: ${name} has type ${JSON.stringify(type)}; known: ${TYPES.join(', ')}`);
    return { name, type: type as Field['type'], optional };
  });
  const names = fields.map((f) => f.name);
  const repeated = names.find((n, i) => names.indexOf(n) !== i);
  if (repeated) throw new UsageError(`--fields: ${repeated} is given twice`);
  return fields;
}

/** The zod expression validating `field` (text through safeText, so it is stored and read back as sent). */
export function zodOf(field: Field): string {
  const base = { string: 'safeText().min(1).max(200)', int: 'z.number().int()', number: 'z.number()', boolean: 'z.boolean()' }[field.type];
  return field.optional ? `${base}.optional()` : base;
}

/** An example value of `field` for a generated test. */
export function sampleOfField(field: Field): string | number | boolean {
  return { string: `${field.name}-1`, int: 1, number: 1.5, boolean: true }[field.type];
}

/** `{\n  a: …,\n  b: …,\n}` with one line per entry, or `{}`. */
export function objectLiteral(entries: Array<[string, string]>, indent = ''): string {
  if (entries.length === 0) return '{}';
  return `{\n${entries.map(([k, v]) => `${indent}  ${k}: ${v},`).join('\n')}\n${indent}}`;
}
