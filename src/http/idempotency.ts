import type { Context } from 'hono';
import { sqlOf, type Tx } from '../db/open-database.ts';
import { BadRequestError, IdempotencyConflictError, type AppError } from '../errors.ts';
import { storedText, textOrBytes } from '../db/column-guards.ts';

/**
 * A key's stored response. Its text is read through guards: bytes that are no UTF-8 (a script's edit) would abort the
 * process in the driver.
 */
const STORED_RESPONSE_SQL = `SELECT ${textOrBytes('fingerprint')} AS fingerprint, status_code, ${textOrBytes('response_body')} AS response_body,
  ${textOrBytes('location')} AS location FROM idempotency_keys WHERE key = ?`;

/** A command's answer to send (and, when 2xx, to store under its Idempotency-Key). */
export type CommandResponse = { status: number; body: unknown; location?: string };
/**
 * An expected refusal (not found, conflict, key reused), returned from inside the writer rather than thrown, so the
 * writes grouped into the same transaction commit without a rollback; the route throws it once the write resolved.
 */
export type CommandProblem = { problem: AppError };
export type IdempotencyKey = { key: string; fingerprint: string };

/** Reads and checks the Idempotency-Key header; the fingerprint covers method, path and the validated body. */
export async function readIdempotencyKey(c: Context, validatedBody: unknown): Promise<IdempotencyKey | undefined> {
  const key = c.req.header('Idempotency-Key');
  if (key === undefined) return undefined;
  if (!/^[\x21-\x7e]{1,255}$/.test(key)) {
    throw new BadRequestError('Idempotency-Key must be 1 to 255 visible ASCII characters.');
  }
  const material = `${c.req.method} ${c.req.path}\n${JSON.stringify(validatedBody)}`;
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(material));
  const fingerprint = Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
  return { key, fingerprint };
}

/**
 * Runs a command once per Idempotency-Key. Must be called inside the command's write transaction, so the key row
 * commits with the command or not at all. A known key with the same fingerprint returns the stored response
 * (`replayed: true`) without running `command`; with another fingerprint it returns an IdempotencyConflictError
 * problem. Only successful (2xx) responses are stored: a refused or failed command leaves nothing to replay.
 */
export async function runIdempotent(
  tx: Tx,
  key: IdempotencyKey | undefined,
  now: Date,
  command: () => Promise<CommandResponse | CommandProblem>,
): Promise<(CommandResponse & { replayed: boolean }) | CommandProblem> {
  if (!key) {
    const res = await command();
    return 'problem' in res ? res : { ...res, replayed: false };
  }
  const run = sqlOf(tx);
  const stored = (await run.execute({ sql: STORED_RESPONSE_SQL, args: [key.key] })).rows[0];
  if (stored) {
    const [fingerprint, body, location] = [stored.fingerprint, stored.response_body, stored.location].map((v) => (v === null ? null : storedText(v)));
    if (fingerprint === undefined || body === undefined || location === undefined) {
      // the command ran once already: running it again would repeat it, so the request fails (500) instead
      throw new Error(`the stored response of idempotency key ${JSON.stringify(key.key)} holds bytes that are not UTF-8 text`);
    }
    if (fingerprint !== key.fingerprint) return { problem: new IdempotencyConflictError() };
    return {
      status: Number(stored.status_code),
      body: JSON.parse(String(body)),
      ...(location ? { location } : {}),
      replayed: true,
    };
  }
  const res = await command();
  if ('problem' in res) return res;
  if (res.status >= 200 && res.status < 300) {
    await run.execute({
      sql: 'INSERT INTO idempotency_keys (key, fingerprint, status_code, response_body, location, created_at) VALUES (?, ?, ?, ?, ?, ?)',
      args: [key.key, key.fingerprint, res.status, JSON.stringify(res.body), res.location ?? null, now.getTime()],
    });
  }
  return { ...res, replayed: false };
}

/**
 * Writes a CommandResponse, marking replays with `Idempotent-Replayed: true`; a CommandProblem is thrown, after the
 * write resolved, for app.onError to answer as problem+json.
 */
export function sendCommandResponse(c: Context, res: (CommandResponse & { replayed: boolean }) | CommandProblem): Response {
  if ('problem' in res) throw res.problem;
  if (res.location) c.header('Location', res.location);
  if (res.replayed) c.header('Idempotent-Replayed', 'true');
  // a body-less status (204, 205, 304) cannot carry JSON
  if (res.status === 204 || res.status === 205 || res.status === 304) return c.body(null, res.status);
  return c.json(res.body as object, res.status as 200);
}
