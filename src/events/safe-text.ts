import { z } from 'zod';

/** Text with no control character (C0 including NUL, DEL, C1) and no UTF-16 surrogate left unpaired into a character. */
const SAFE_TEXT = /^[^\p{Cc}\p{Cs}]*$/u;

/**
 * A string that is stored and read back exactly as sent: no control character (C0 including NUL, DEL, C1) and
 * no unpaired surrogate. libSQL cuts text at a NUL and replaces a lone surrogate with U+FFFD, so such text would
 * come back, or reach a subscriber, as something else. A pattern rather than a refinement, so the rule shows in the
 * JSON Schema of the events (docs/asyncapi.yaml). Chain length checks as on z.string().
 */
export function safeText() {
  return z.string().regex(SAFE_TEXT, { message: 'must not contain control characters or unpaired surrogates' });
}
