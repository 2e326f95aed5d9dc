import type { z } from 'zod';
import { DEFAULT_SERVICE_NAME } from './service-name.ts';

export type ProblemIssue = { path: string; message: string; code: string };

/** An error with a defined HTTP meaning; app.onError turns it into RFC 9457 problem+json. */
export class AppError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly title: string,
    detail?: string,
    readonly extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(detail ?? title);
    this.name = new.target.name;
  }
}

export class ValidationError extends AppError {
  constructor(issues: z.core.$ZodIssue[], detail = 'The request does not match the expected shape.') {
    super(400, 'validation', 'Invalid request', detail, { issues: issues.map(toProblemIssue) });
  }
}

export class BadRequestError extends AppError {
  constructor(detail: string) {
    super(400, 'bad-request', 'Bad request', detail);
  }
}

export class NotFoundError extends AppError {
  constructor(detail: string) {
    super(404, 'not-found', 'Not found', detail);
  }
}

export class ConflictError extends AppError {
  constructor(detail: string) {
    super(409, 'conflict', 'Conflict', detail);
  }
}

export class IdempotencyConflictError extends AppError {
  constructor() {
    super(422, 'idempotency-key-reused', 'Idempotency-Key reused', 'This Idempotency-Key was already used with a different request.');
  }
}

export class UnauthorizedError extends AppError {
  constructor() {
    super(401, 'unauthorized', 'Unauthorized', 'A valid bearer token is required.', {}, { 'WWW-Authenticate': 'Bearer' });
  }
}

export class ServiceUnavailableError extends AppError {
  constructor(detail: string, retryAfterSeconds = 1) {
    super(503, 'unavailable', 'Service unavailable', detail, {}, { 'Retry-After': String(retryAfterSeconds) });
  }
}

/** Problem `type` URIs: tag URIs naming the service, stable identifiers that need no web site. */
export const problemType = (code: string, service = DEFAULT_SERVICE_NAME) => `tag:${service},2026:problem:${code}`;

/** Renders an AppError as an RFC 9457 problem details object, its type URI naming `service`. */
export function toProblem(error: AppError, instance?: string, service?: string): Record<string, unknown> {
  return {
    type: problemType(error.code, service),
    title: error.title,
    status: error.status,
    detail: error.message,
    ...(instance ? { instance } : {}),
    ...error.extra,
  };
}

function toProblemIssue(issue: z.core.$ZodIssue): ProblemIssue {
  return { path: issue.path.map(String).join('.'), message: issue.message, code: issue.code };
}
