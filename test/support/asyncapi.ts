import { DiagnosticSeverity, Parser, type AsyncAPIDocumentInterface } from '@asyncapi/parser';
import { expect } from 'vitest';

/**
 * Parses an AsyncAPI document (object, JSON or YAML text) with @asyncapi/parser and fails the test on any error
 * diagnostic (schema, $ref or semantic rule); returns the parsed model.
 */
export async function parseAsyncApi(doc: string | { asyncapi: string }): Promise<AsyncAPIDocumentInterface> {
  const { document, diagnostics } = await new Parser().parse(typeof doc === 'string' ? doc : structuredClone(doc));
  const errors = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error).map((d) => `${d.path.join('/')}: ${d.message}`);
  expect(errors).toEqual([]);
  expect(document).toBeDefined();
  return document!;
}

/** Operation id → [action, channel address, message ids], to compare a document's operations whole. */
export function operationsOf(doc: AsyncAPIDocumentInterface): Record<string, [string, string | null | undefined, string[]]> {
  return Object.fromEntries(
    doc
      .operations()
      .all()
      .map((o) => [
        o.id(),
        [
          o.action(),
          o.channels().all()[0]?.address(),
          o
            .messages()
            .all()
            .map((m) => m.id()),
        ],
      ]),
  );
}
