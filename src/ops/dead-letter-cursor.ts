import type { DeadLetterCursor } from '../inbox/dead-letters.ts';

/** The `next` of a dead-letter page: base64url of the cursor's JSON, opaque and safe in a query string as it is. */
export function encodeCursor(cursor: DeadLetterCursor): string {
  const bytes = new TextEncoder().encode(JSON.stringify([cursor.deadAt, cursor.eventId]));
  return btoa(String.fromCharCode(...bytes))
    .replaceAll('+', '-')
    .replaceAll('/', '_')
    .replace(/=+$/, '');
}

/** The cursor `encodeCursor` made `text` from, or undefined for text it did not make. */
export function decodeCursor(text: string): DeadLetterCursor | undefined {
  try {
    const bytes = Uint8Array.from(atob(text.replaceAll('-', '+').replaceAll('_', '/')), (ch) => ch.charCodeAt(0));
    const [deadAt, eventId] = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)) as unknown[];
    if (Number.isSafeInteger(deadAt) && typeof eventId === 'string') return { deadAt: deadAt as number, eventId };
  } catch {
    // not base64url, not UTF-8 or not JSON: not one of ours
  }
  return undefined;
}
