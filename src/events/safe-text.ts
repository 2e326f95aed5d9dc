import { z } from 'zod';

/** Control characters (C0 including NUL, DEL, C1) and UTF-16 surrogates not paired into a character. */
const UNSAFE = /[\p{Cc}\p{Cs}]/u;

/**
 * A string that is stored and read back exactly as sent: no control character (C0 including NUL, DEL, C1) and
 * no unpaired surrogate. libSQL cuts text at a NUL and replaces a lone surrogate with U+FFFD, so such text would
 * come back, or reach a subscriber, as something else. Chain length checks as on z.string().
 */
export function safeText() {
  return z.string().refine((s) => !UNSAFE.test(s), { message: 'must not contain control characters or unpaired surrogates' });
}
