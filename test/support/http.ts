import type { Client } from '@libsql/client';
import { expect } from 'vitest';
import { tableCounts } from './db.ts';

/** Something that answers requests in-process: a Hono app. */
export type RequestHandler = { request(path: string, init?: RequestInit): Response | Promise<Response> };

/** POSTs `body` (JSON-encoded unless already a string) with a JSON content type; `headers` are added or replace it. */
export function postJson(app: RequestHandler, path: string, body: unknown = {}, headers: Record<string, string> = {}): Promise<Response> {
  return Promise.resolve(
    app.request(path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    }),
  );
}

/** An RFC 9457 problem as the app answers it. */
export type Problem = { type: string; title: string; status: number; detail: string; issues?: Array<{ path: string; message: string; code: string }> };

/** Asserts an application/problem+json answer with `status` and the RFC 9457 members; returns the problem. */
export async function expectProblem(res: Response, status: number): Promise<Problem> {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toBe('application/problem+json');
  const body = (await res.json()) as Problem;
  expect(body).toMatchObject({ status, type: expect.stringMatching(/.+/), title: expect.stringMatching(/.+/), detail: expect.any(String) });
  return body;
}

/** Asserts a 400 validation problem listing an issue at each of `paths` (dot-joined, '' = the body itself). */
export async function expectIssues(res: Response, paths: string[]): Promise<Problem> {
  const body = await expectProblem(res, 400);
  expect(Array.isArray(body.issues)).toBe(true);
  for (const issue of body.issues!) expect(issue).toMatchObject({ path: expect.any(String), message: expect.any(String), code: expect.any(String) });
  expect(body.issues!.map((i) => i.path)).toEqual(expect.arrayContaining(paths));
  return body;
}

/** Runs `send` and asserts that none of `tables` (default: the fixture's command side) changed its row count. */
export async function expectUnchanged(client: Client, send: () => Promise<void>, tables?: readonly string[]): Promise<void> {
  const before = await tableCounts(client, tables);
  await send();
  expect(await tableCounts(client, tables)).toEqual(before);
}
