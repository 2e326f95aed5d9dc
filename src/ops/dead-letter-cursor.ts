import { bytesFromHex, hexOf } from '../db/column-guards.ts';
import { isTextBytes, type DeadAtKey, type DeadLetterCursor } from '../inbox/dead-letters.ts';

/**
 * How a key that is no finite number travels in a cursor: an integer past 2^53 as decimal text, a text as it is, a
 * blob in hex, ±Infinity (a REAL, which JSON cannot hold) as `Infinity` or `-Infinity`, text that is no UTF-8 as its
 * stored bytes in hex; `n` is a finite number, in a cursor whose event id needs a kind.
 */
type KeyKind = 'n' | 'i' | 's' | 'b' | 'f' | 't';

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** A dead_at key as a cursor part and its kind. */
function keyPart(key: DeadAtKey): [number | string, KeyKind] {
  if (typeof key === 'number') return Number.isFinite(key) ? [key, 'n'] : [String(key), 'f'];
  if (typeof key === 'bigint') return [String(key), 'i'];
  if (typeof key === 'string') return [key, 's'];
  return isTextBytes(key) ? [hexOf(key.textBytes), 't'] : [hexOf(key), 'b'];
}

/**
 * The `next` of a dead-letter page: base64url of the cursor's JSON, opaque and safe in a query string as it is.
 * A time of death the subscriber wrote travels as `[ms, eventId]`; any other stored value (a script's) as
 * `[text, eventId, kind]`, and an event id that is no text as `[key, hex, keyKind, idKind]` (`b` a blob, `t` the stored
 * bytes of text that is no UTF-8), so the next page binds exactly the values it resumes after.
 */
export function encodeCursor(cursor: DeadLetterCursor): string {
  const [key, kind] = keyPart(cursor.deadAt);
  const id = cursor.eventId;
  const parts =
    typeof id !== 'string'
      ? [key, isTextBytes(id) ? hexOf(id.textBytes) : hexOf(id), kind, isTextBytes(id) ? 't' : 'b']
      : kind === 'n'
        ? [key, id]
        : [key, id, kind];
  const bytes = new TextEncoder().encode(JSON.stringify(parts));
  let binary = '';
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
}

const HEX = /^(?:[0-9a-f]{2})*$/;

/** The key a cursor's `[key, eventId, kind]` stands for, or undefined for one encodeCursor would not write. */
function keyOf(key: unknown, kind: KeyKind): DeadAtKey | undefined {
  if (kind === 'n') return typeof key === 'number' && Number.isFinite(key) ? key : undefined;
  if (typeof key !== 'string') return undefined;
  if (kind === 's') return key;
  if (kind === 'f') return key === 'Infinity' ? Number.POSITIVE_INFINITY : key === '-Infinity' ? Number.NEGATIVE_INFINITY : undefined;
  if (kind === 'i') {
    if (!/^-?[0-9]{1,19}$/.test(key)) return undefined;
    const n = BigInt(key);
    return n >= INT64_MIN && n <= INT64_MAX ? n : undefined;
  }
  if (!HEX.test(key)) return undefined;
  return kind === 't' ? { textBytes: bytesFromHex(key) } : bytesFromHex(key);
}

const KEY_KINDS: readonly unknown[] = ['n', 'i', 's', 'b', 'f', 't'];

/** The cursor `encodeCursor` made `text` from, or undefined for text it did not make. */
export function decodeCursor(text: string): DeadLetterCursor | undefined {
  try {
    const bytes = Uint8Array.from(atob(text.replaceAll('-', '+').replaceAll('_', '/')), (ch) => ch.charCodeAt(0));
    const parts = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)) as unknown[];
    if (!Array.isArray(parts) || typeof parts[1] !== 'string') return undefined;
    const [key, id, kind, idKind] = parts as [unknown, string, unknown, unknown];
    if (parts.length === 2) return typeof key === 'number' && Number.isFinite(key) ? { deadAt: key, eventId: id } : undefined;
    if (!KEY_KINDS.includes(kind) || (parts.length === 3 && kind === 'n')) return undefined;
    const deadAt = keyOf(key, kind as KeyKind);
    if (deadAt === undefined) return undefined;
    if (parts.length === 3) return { deadAt, eventId: id };
    if (parts.length !== 4 || (idKind !== 'b' && idKind !== 't') || !HEX.test(id)) return undefined;
    return { deadAt, eventId: idKind === 't' ? { textBytes: bytesFromHex(id) } : bytesFromHex(id) };
  } catch {
    // not base64url, not UTF-8 or not JSON: not one of ours
  }
  return undefined;
}
