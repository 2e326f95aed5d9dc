import { bytesFromHex } from '../db/column-guards.ts';
import type { DeadAtKey, DeadLetterCursor } from '../inbox/dead-letters.ts';

/**
 * How a key that is no finite number travels in a cursor: an integer past 2^53 as decimal text, a text as it is, a
 * blob in hex, ±Infinity (a REAL, which JSON cannot hold) as `Infinity` or `-Infinity`.
 */
type KeyKind = 'i' | 's' | 'b' | 'f';

const toHex = (bytes: Uint8Array) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * The `next` of a dead-letter page: base64url of the cursor's JSON, opaque and safe in a query string as it is.
 * A time of death the subscriber wrote travels as `[ms, eventId]`; any other stored value (a script's) as
 * `[text, eventId, kind]`, so the next page binds exactly the value it resumes after.
 */
export function encodeCursor(cursor: DeadLetterCursor): string {
  const key = cursor.deadAt;
  const parts =
    typeof key === 'number'
      ? Number.isFinite(key)
        ? [key, cursor.eventId]
        : [String(key), cursor.eventId, 'f']
      : typeof key === 'bigint'
        ? [String(key), cursor.eventId, 'i']
        : typeof key === 'string'
          ? [key, cursor.eventId, 's']
          : [toHex(key), cursor.eventId, 'b'];
  const bytes = new TextEncoder().encode(JSON.stringify(parts));
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
}

/** The key a cursor's `[text, eventId, kind]` stands for, or undefined for one encodeCursor would not write. */
function keyOf(text: string, kind: KeyKind): DeadAtKey | undefined {
  if (kind === 's') return text;
  if (kind === 'f') return text === 'Infinity' ? Number.POSITIVE_INFINITY : text === '-Infinity' ? Number.NEGATIVE_INFINITY : undefined;
  if (kind === 'i') {
    if (!/^-?[0-9]{1,19}$/.test(text)) return undefined;
    const n = BigInt(text);
    return n >= INT64_MIN && n <= INT64_MAX ? n : undefined;
  }
  if (!/^(?:[0-9a-f]{2})*$/.test(text)) return undefined;
  return bytesFromHex(text);
}

/** The cursor `encodeCursor` made `text` from, or undefined for text it did not make. */
export function decodeCursor(text: string): DeadLetterCursor | undefined {
  try {
    const bytes = Uint8Array.from(atob(text.replaceAll('-', '+').replaceAll('_', '/')), (ch) => ch.charCodeAt(0));
    const parts = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)) as unknown[];
    if (!Array.isArray(parts) || typeof parts[1] !== 'string') return undefined;
    const [key, eventId, kind] = parts as [unknown, string, unknown];
    if (parts.length === 2 && typeof key === 'number' && Number.isFinite(key)) return { deadAt: key, eventId };
    if (parts.length === 3 && typeof key === 'string' && (kind === 'i' || kind === 's' || kind === 'b' || kind === 'f')) {
      const deadAt = keyOf(key, kind);
      if (deadAt !== undefined) return { deadAt, eventId };
    }
  } catch {
    // not base64url, not UTF-8 or not JSON: not one of ours
  }
  return undefined;
}
