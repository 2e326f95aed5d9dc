// Columns a script, a restore or another tool may fill with anything (text in an INTEGER column, an integer
// past 2^53 that the driver refuses to turn into a number, a blob where text belongs): read through these guards,
// such a value comes back NULL (or as text) instead of failing the whole statement or the page built from it.

/** The range of a JavaScript Date in ms: a value outside it is no time. */
export const MAX_TIME_MS = 8_640_000_000_000_000;

/** SQL for `column` as a time in ms: its value when it is an integer a Date can hold, else NULL. */
export const timeMsOrNull = (column: string): string =>
  `CASE WHEN typeof(${column}) = 'integer' AND ${column} BETWEEN -${MAX_TIME_MS} AND ${MAX_TIME_MS} THEN ${column} END`;

/** SQL for `column` as an integer in [min, max] (both within ±(2^53 − 1)), else NULL. */
export const integerOrNull = (column: string, min = -Number.MAX_SAFE_INTEGER, max = Number.MAX_SAFE_INTEGER): string =>
  `CASE WHEN typeof(${column}) = 'integer' AND ${column} BETWEEN ${min} AND ${max} THEN ${column} END`;

/** SQL: `column` (text) holds anything but printable ASCII. NUL is checked apart because GLOB stops at the first one. */
const notPlain = (column: string) => `(${column} GLOB '*[^ -~]*' OR instr(${column}, char(0)) > 0)`;

/** SQL for the stored bytes of `column` in hex when it holds a blob or text other than printable ASCII, else NULL. */
export const hexUnlessPlain = (column: string): string =>
  `CASE WHEN typeof(${column}) = 'blob' OR (typeof(${column}) = 'text' AND ${notPlain(column)}) THEN hex(${column}) END`;

/**
 * SQL for a text column a script may have filled with bytes that are no UTF-8 (a Latin-1 import, `CAST(x'e9' AS TEXT)`)
 * or with a blob: the driver cannot read such text and aborts the whole process (a panic, not an error). Text of
 * printable ASCII comes back as it is. Any other text, and a blob, comes back as bytes behind a tag that says what they
 * are (see tagOf), for textOf or storedText to decode; other values come back as they are.
 */
export const textOrBytes = (column: string): string =>
  `CASE WHEN typeof(${column}) = 'text' AND ${notPlain(column)}
    THEN unhex((SELECT CASE encoding WHEN 'UTF-16le' THEN 'FFFE' WHEN 'UTF-16be' THEN 'FEFF' ELSE 'EFBBBF' END FROM pragma_encoding) || hex(${column}))
    WHEN typeof(${column}) = 'blob' THEN unhex('00' || hex(${column}))
    ELSE ${column} END`;

/** The tags of textOrBytes: text in the database's encoding (its byte order mark), or a blob (00). */
type TextTag = 'utf-8' | 'utf-16le' | 'utf-16be' | 'blob';

/** The tag of bytes textOrBytes gave back and where their content starts; untagged bytes count as a blob's. */
function tagOf(bytes: Uint8Array): { tag: TextTag; start: number } {
  if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) return { tag: 'utf-8', start: 3 };
  if (bytes[0] === 0xff && bytes[1] === 0xfe) return { tag: 'utf-16le', start: 2 };
  if (bytes[0] === 0xfe && bytes[1] === 0xff) return { tag: 'utf-16be', start: 2 };
  return { tag: 'blob', start: bytes[0] === 0x00 ? 1 : 0 };
}

const utf8 = new TextDecoder('utf-8', { ignoreBOM: true });
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** UTF-16 code units as text; invalid ones (a lone surrogate, an odd byte) as U+FFFD, or undefined when `strict`. */
function utf16Text(bytes: Uint8Array, littleEndian: boolean, strict: boolean): string | undefined {
  const units: number[] = [];
  for (let i = 0; i + 1 < bytes.length; i += 2) units.push(littleEndian ? bytes[i]! | (bytes[i + 1]! << 8) : (bytes[i]! << 8) | bytes[i + 1]!);
  let text = '';
  for (let i = 0; i < units.length; i++) {
    const unit = units[i]!;
    const next = units[i + 1];
    if (unit >= 0xd800 && unit <= 0xdbff && next !== undefined && next >= 0xdc00 && next <= 0xdfff) {
      text += String.fromCharCode(unit, next);
      i++;
    } else if (unit >= 0xd800 && unit <= 0xdfff) {
      if (strict) return undefined;
      text += '\ufffd';
    } else text += String.fromCharCode(unit);
  }
  if (bytes.length % 2 === 0) return text;
  return strict ? undefined : `${text}\ufffd`;
}

/** UTF-8 bytes as text: invalid ones as U+FFFD, or undefined when `strict`. */
function utf8Text(bytes: Uint8Array, strict: boolean): string | undefined {
  if (!strict) return utf8.decode(bytes);
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/** Tagged bytes (see textOrBytes) as text; when `strict`, undefined for a blob or for bytes that are no valid text. */
function taggedText(value: ArrayBuffer | Uint8Array, strict: boolean): string | undefined {
  const bytes = value instanceof Uint8Array ? value : new Uint8Array(value);
  const { tag, start } = tagOf(bytes);
  const content = bytes.subarray(start);
  if (tag === 'utf-16le' || tag === 'utf-16be') return utf16Text(content, tag === 'utf-16le', strict);
  return tag === 'blob' && strict ? undefined : utf8Text(content, strict);
}

const isBytes = (value: unknown): value is ArrayBuffer | Uint8Array => value instanceof ArrayBuffer || value instanceof Uint8Array;

/** A column read through textOrBytes, for an operator to see: bytes that are no valid text (or a blob's) shown as U+FFFD. */
export const textOf = (value: unknown): string => (isBytes(value) ? taggedText(value, false)! : String(value));

/** A column read through textOrBytes as the text it holds: undefined when it holds a blob or bytes that are no valid text. */
export const storedText = (value: unknown): string | undefined =>
  typeof value === 'string' ? value : isBytes(value) ? taggedText(value, true) : String(value);

/** Bytes as lower-case hex (what bytesFromHex reads). */
export const hexOf = (bytes: Uint8Array): string => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');

/** The bytes of hex text (SQLite's hex() writes upper case, a cursor lower case); the caller checks the text first. */
export const bytesFromHex = (hex: string): Uint8Array => Uint8Array.from(hex.match(/../g) ?? [], (h) => Number.parseInt(h, 16));
