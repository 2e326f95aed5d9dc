import { describeRoute, resolver } from 'hono-openapi';
import type { MiddlewareHandler } from 'hono';
import { toJSONSchema, type z } from 'zod';

// Route descriptions for the OpenAPI document (src/http/api-description.ts): middleware that does nothing at run
// time and carries its part of the document. The shared parts are components of the document, referenced here.

const ref = (kind: 'parameters' | 'schemas', name: string) => ({ $ref: `#/components/${kind}/${name}` });

/** A problem+json response (RFC 9457) with `description`. */
export const problemResponse = (description: string) => ({
  description,
  content: { 'application/problem+json': { schema: ref('schemas', 'Problem') } },
});

/** A JSON response with `description`, its shape left open. */
export const jsonResponse = (description: string) => ({ description, content: { 'application/json': { schema: { type: 'object' as const } } } });

const replayed = {
  'Idempotent-Replayed': {
    description: '`true` when this is the stored answer to a repeated Idempotency-Key.',
    schema: { type: 'string' as const, enum: ['true'] },
  },
};

/** The answers every command route may give, whatever its handler: the helper's refusals and the handler's. */
export const COMMAND_RESPONSES = {
  200: { ...jsonResponse('Done.'), headers: replayed },
  201: {
    ...jsonResponse('Created; Location names the new resource.'),
    headers: { Location: { description: 'The created resource.', schema: { type: 'string' as const } }, ...replayed },
  },
  400: problemResponse(
    'The body does not match its schema (the zod issues are in `issues`), is not UTF-8 or did not arrive whole, or the Idempotency-Key is malformed.',
  ),
  404: problemResponse('The resource the command acts on does not exist.'),
  409: problemResponse('The command conflicts with the resource’s state.'),
  413: problemResponse('The body is larger than the service accepts.'),
  415: problemResponse('The body is not application/json, or is sent with a Content-Encoding (send it as it is: Accept-Encoding: identity).'),
  422: problemResponse('The Idempotency-Key was already used with a different request.'),
  501: problemResponse('The body is sent with a Transfer-Encoding other than chunked.'),
  503: problemResponse('The database is busy or unreachable; retry after Retry-After seconds.'),
};

/** "placeOrder" → "Place order": a summary from a handler's name. */
export function summaryOf(name: string): string {
  const words = name.replace(/([a-z0-9])([A-Z])/g, '$1 $2').toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/**
 * Describes a command route: its JSON body from the zod schema (optional when `emptyBody`), the Idempotency-Key,
 * traceparent and correlation headers, and every answer of COMMAND_RESPONSES. commandRoute adds it for you.
 */
export function describeCommand(body: z.ZodType, options: { summary: string; emptyBody?: boolean }): MiddlewareHandler {
  return describeRoute({
    summary: options.summary,
    parameters: [ref('parameters', 'IdempotencyKey'), ref('parameters', 'Traceparent'), ref('parameters', 'CorrelationId')],
    requestBody: { required: !options.emptyBody, content: { 'application/json': { schema: resolver(body) } } },
    responses: COMMAND_RESPONSES,
  });
}

/** Describes a read route (GET): `summary`, a JSON 200 and, with `notFound`, a problem+json 404. */
export function describeQuery(summary: string, options: { notFound?: string } = {}): MiddlewareHandler {
  return describeRoute({
    summary,
    responses: { 200: jsonResponse('OK.'), ...(options.notFound ? { 404: problemResponse(options.notFound) } : {}) },
  });
}

/**
 * Describes an admin route: `summary`, the bearer token (ADMIN_TOKEN) it requires, a JSON 200, a 401 problem and,
 * with `notFound`, a 404 problem; `query` (a zod object) documents its query parameters.
 */
export function describeAdmin(summary: string, options: { notFound?: string; query?: z.ZodObject } = {}): MiddlewareHandler {
  return describeRoute({
    summary,
    tags: ['admin'],
    security: [{ adminToken: [] }],
    ...(options.query ? { parameters: queryParameters(options.query) } : {}),
    responses: {
      200: jsonResponse('Done.'),
      ...(options.query ? { 400: problemResponse('A query parameter is invalid.') } : {}),
      401: problemResponse('The bearer token is missing or wrong (WWW-Authenticate: Bearer).'),
      ...(options.notFound ? { 404: problemResponse(options.notFound) } : {}),
    },
  });
}

function queryParameters(query: z.ZodObject) {
  const schema = toJSONSchema(query, { io: 'input', unrepresentable: 'any' }) as { properties?: Record<string, object>; required?: string[] };
  return Object.entries(schema.properties ?? {}).map(([name, s]) => ({
    name,
    in: 'query' as const,
    required: schema.required?.includes(name) ?? false,
    schema: s,
  }));
}
