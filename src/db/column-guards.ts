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

const decoder = new TextDecoder();
/** A column read back as text: a blob (what a script may store where text belongs) decoded as UTF-8, else its string. */
export const textOf = (value: unknown): string => (value instanceof ArrayBuffer ? decoder.decode(value) : String(value));

/** The bytes of hex text (SQLite's hex() writes upper case, a cursor lower case); the caller checks the text first. */
export const bytesFromHex = (hex: string): Uint8Array => Uint8Array.from(hex.match(/../g) ?? [], (h) => Number.parseInt(h, 16));
