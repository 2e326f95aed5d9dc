// What a scaffold derives from an event's zod schema (through its JSON Schema): an example `data` value for the
// generated test, and the columns a subscriber's starter table needs to keep the event's fields.
import { z } from 'zod';

type JsonSchema = {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  enum?: unknown[];
  const?: unknown;
  format?: string;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  minItems?: number;
};

/** The JSON Schema of what a zod schema accepts. */
export function jsonSchemaOf(schema: z.ZodType): JsonSchema {
  return z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
}

/** The schema without a `null` alternative, and whether there was one. */
function nonNull(s: JsonSchema): { schema: JsonSchema; nullable: boolean } {
  const alternatives = s.anyOf ?? s.oneOf;
  if (alternatives) {
    const rest = alternatives.filter((a) => a.type !== 'null');
    return { schema: rest.length === 1 ? rest[0]! : { anyOf: rest }, nullable: rest.length < alternatives.length };
  }
  if (Array.isArray(s.type)) {
    const rest = s.type.filter((t) => t !== 'null');
    return { schema: { ...s, type: rest.length === 1 ? rest[0]! : rest }, nullable: rest.length < s.type.length };
  }
  return { schema: s, nullable: false };
}

const CLASSES: Record<string, string> = { d: '1', w: 'a', s: ' ', D: 'a', W: '-', S: 'a' };

/** A string matching a simple anchored pattern (literals, escapes, classes, quantifiers), or undefined. */
function sampleOfPattern(pattern: string): string | undefined {
  if (!pattern.startsWith('^') || !pattern.endsWith('$') || /[|(]/.test(pattern)) return undefined;
  const body = pattern.slice(1, -1);
  let out = '';
  for (let i = 0; i < body.length; ) {
    let unit: string;
    if (body[i] === '\\') {
      unit = CLASSES[body[i + 1]!] ?? body[i + 1]!;
      i += 2;
    } else if (body[i] === '[') {
      const close = body.indexOf(']', i);
      if (close < 0 || body[i + 1] === '^') return undefined;
      unit = body[i + 1] === '\\' ? (CLASSES[body[i + 2]!] ?? body[i + 2]!) : body[i + 1]!;
      i = close + 1;
    } else if (body[i] === '.') {
      unit = 'a';
      i++;
    } else {
      unit = body[i]!;
      i++;
    }
    let times = 1;
    const quantifier = /^(\{(\d+)(,\d*)?\}|[+*?])/.exec(body.slice(i));
    if (quantifier) {
      times = quantifier[2] !== undefined ? Number(quantifier[2]) : quantifier[0] === '+' ? 1 : quantifier[0] === '*' ? 0 : 0;
      i += quantifier[0].length;
    }
    out += unit.repeat(times);
  }
  return out;
}

/** An example value `schema` accepts, named after `key` where it is text; undefined parts are left for the user. */
export function sampleOf(schema: JsonSchema, key = 'value'): unknown {
  const { schema: s } = nonNull(schema);
  if (s.const !== undefined) return s.const;
  if (s.enum) return s.enum[0];
  if (s.anyOf) return sampleOf(s.anyOf[0]!, key);
  switch (s.type) {
    case 'object':
      return Object.fromEntries(Object.entries(s.properties ?? {}).map(([k, v]) => [k, sampleOf(v, k)]));
    case 'array':
      return Array.from({ length: Math.max(1, s.minItems ?? 1) }, () => sampleOf(s.items ?? {}, key));
    case 'integer':
    case 'number': {
      const low = s.minimum ?? (s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : 1);
      return s.maximum !== undefined ? Math.min(Math.max(low, 1), s.maximum) : Math.max(low, 1);
    }
    case 'boolean':
      return true;
    case 'null':
      return null;
    case 'string': {
      if (s.format === 'date-time') return '2026-01-01T00:00:00.000Z';
      if (s.format === 'date') return '2026-01-01';
      if (s.format === 'email') return 'someone@example.com';
      if (s.format === 'uuid') return '01890a5d-ac96-774b-bcce-b302099a8057';
      if (s.pattern) {
        const matched = sampleOfPattern(s.pattern);
        if (matched !== undefined) return matched;
      }
      const text = `${key}-1`;
      return text.padEnd(s.minLength ?? 0, 'x').slice(0, s.maxLength ?? text.length);
    }
    default:
      return `${key}-1`;
  }
}

/** A column of a subscriber's starter table: the event field it keeps and how drizzle stores it. */
export type Column = { field: string; kind: 'text' | 'integer' | 'real' | 'boolean' | 'json'; notNull: boolean };

/** The column kind that holds values of `schema`. */
function kindOf(schema: JsonSchema): Column['kind'] {
  const { schema: s } = nonNull(schema);
  if (s.enum) return s.enum.every((v) => typeof v === 'string') ? 'text' : 'json';
  switch (s.type) {
    case 'string':
      return 'text';
    case 'integer':
      return 'integer';
    case 'number':
      return 'real';
    case 'boolean':
      return 'boolean';
    default:
      return 'json';
  }
}

/**
 * One column per top-level field of the events' data (the union over all of them, in order of appearance); a column
 * is NOT NULL when every event requires its field and none allows null. Fields of differing kinds become JSON.
 */
export function columnsOf(schemas: JsonSchema[]): Column[] {
  const byField = new Map<string, Column>();
  for (const schema of schemas) {
    for (const [field, prop] of Object.entries(schema.properties ?? {})) {
      const notNull = (schema.required ?? []).includes(field) && !nonNull(prop).nullable;
      const kind = kindOf(prop);
      const seen = byField.get(field);
      byField.set(field, seen ? { field, kind: seen.kind === kind ? kind : 'json', notNull: seen.notNull && notNull } : { field, kind, notNull });
    }
  }
  for (const column of byField.values()) if (!schemas.every((s) => Object.hasOwn(s.properties ?? {}, column.field))) column.notNull = false;
  return [...byField.values()];
}
