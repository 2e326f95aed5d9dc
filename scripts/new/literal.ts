/** `value` (plain JSON) as TypeScript source in the house style: `{ carrier: 'ups', items: [{ sku: 'a' }] }`. */
export function tsLiteral(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (typeof value === 'string') return `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  if (typeof value !== 'object') return String(value);
  if (Array.isArray(value)) return `[${value.map(tsLiteral).join(', ')}]`;
  const entries = Object.entries(value).map(([k, v]) => `${/^[A-Za-z_$][\w$]*$/.test(k) ? k : tsLiteral(k)}: ${tsLiteral(v)}`);
  return entries.length === 0 ? '{}' : `{ ${entries.join(', ')} }`;
}
