// Columns a script, a restore or another tool may fill with anything (text in an INTEGER column, an integer
// past 2^53 that the driver refuses to turn into a number): read through these guards, such a value comes back NULL
// instead of failing the whole statement.

/** The range of a JavaScript Date in ms: a value outside it is no time. */
export const MAX_TIME_MS = 8_640_000_000_000_000;

/** SQL for `column` as a time in ms: its value when it is an integer a Date can hold, else NULL. */
export const timeMsOrNull = (column: string): string =>
  `CASE WHEN typeof(${column}) = 'integer' AND ${column} BETWEEN -${MAX_TIME_MS} AND ${MAX_TIME_MS} THEN ${column} END`;

/** SQL for `column` as an integer in [min, max] (both within ±(2^53 − 1)), else NULL. */
export const integerOrNull = (column: string, min = -Number.MAX_SAFE_INTEGER, max = Number.MAX_SAFE_INTEGER): string =>
  `CASE WHEN typeof(${column}) = 'integer' AND ${column} BETWEEN ${min} AND ${max} THEN ${column} END`;
