import { z } from 'zod';
import { CORRELATION } from '../outbox/event-headers.ts';
import { TRACEPARENT } from '../telemetry/trace-context.ts';
import type { EventCatalog } from './define-events.ts';
import { IntegrationEventEnvelope, SubjectToken } from './integration-event.ts';

/** A JSON Schema (draft-07, the dialect of AsyncAPI 3 schemas) as plain data. */
export type JsonSchema = Record<string, unknown>;

/** Where the schemas of a document live; `$ref`s between them point there. */
const COMPONENT_SCHEMAS = '#/components/schemas/';
/** The entry zod gathers shared and recursive subschemas under, in registry mode. */
const SHARED = '__shared';

/** Key of the payload schema of event type `type` in components.schemas. */
export const payloadSchemaKey = (type: string) => type;
/** Key of the headers schema of event type `type` in components.schemas. */
export const headersSchemaKey = (type: string) => `${type}.headers`;

/** The envelope of event type `type`: the shared fields, `type` and `aggregateType` fixed, `data` by its schema. */
function payloadOf(type: string, aggregate: string, data: z.ZodType): z.ZodType {
  return IntegrationEventEnvelope.extend({
    type: z.literal(type).describe('The versioned event type; a breaking change is a new type (.v2).'),
    aggregateType: z.literal(aggregate).describe('The aggregate type; the subject token after the prefix.'),
    aggregateId: SubjectToken.describe('The aggregate; the last token of the subject. Events of one aggregate arrive in aggregateVersion order.'),
    aggregateVersion: IntegrationEventEnvelope.shape.aggregateVersion.describe('The aggregate version the event produced, from 1.'),
    eventId: IntegrationEventEnvelope.shape.eventId.describe('Unique id of the event (also Nats-Msg-Id): apply each eventId once.'),
    data,
  });
}

/** The headers the relay sets on a message of event type `type` (see src/outbox/event-headers.ts); others may follow. */
function headersOf(type: string, aggregate: string): z.ZodType {
  const envelope = IntegrationEventEnvelope.shape;
  return z.looseObject({
    'Nats-Msg-Id': envelope.eventId.describe('The eventId: JetStream drops a repeat within its duplicate window.'),
    'Event-Type': z.literal(type),
    'Aggregate-Type': z.literal(aggregate),
    'Aggregate-Id': SubjectToken,
    'Aggregate-Version': z
      .string()
      .regex(/^[1-9][0-9]*$/)
      .describe('aggregateVersion in decimal.'),
    'Occurred-At': envelope.occurredAt,
    'Content-Type': z.literal('application/json'),
    traceparent: z
      .string()
      .regex(TRACEPARENT)
      .describe("W3C trace context of the relay's publish span: a child of the command's request span, in the caller's trace when the request carried one."),
    tracestate: z.string().describe('W3C tracestate carried along from the request, when it had one.').optional(),
    'Correlation-Id': z
      .string()
      .regex(CORRELATION)
      .describe("The command's X-Correlation-Id, else its request id (X-Request-Id); absent on events stored without a request.")
      .optional(),
  });
}

/**
 * JSON Schemas of every event type of `catalog`, keyed for components.schemas: the payload (`<type>`) and the headers
 * (`<type>.headers`), plus any subschema zod extracts (an `id` in `.meta()`, a recursive schema) under its own key.
 * The zod limits (lengths, ranges, patterns) carry over; a schema with no JSON Schema form (a transform, a Date)
 * throws a RangeError naming its type.
 */
export function eventJsonSchemas(catalog: EventCatalog): Record<string, JsonSchema> {
  const registry = z.registry<{ id: string }>();
  for (const [type, def] of Object.entries(catalog)) {
    registry.add(payloadOf(type, def.aggregate, def.data), { id: payloadSchemaKey(type) });
    registry.add(headersOf(type, def.aggregate), { id: headersSchemaKey(type) });
  }
  let converted: Record<string, JsonSchema>;
  try {
    converted = z.toJSONSchema(registry, { target: 'draft-07', uri: (id) => `${COMPONENT_SCHEMAS}${id}` }).schemas as Record<string, JsonSchema>;
  } catch (error) {
    for (const [type, def] of Object.entries(catalog)) {
      try {
        z.toJSONSchema(def.data, { target: 'draft-07' });
      } catch (cause) {
        throw new RangeError(`the data schema of ${type} cannot be described in JSON Schema: ${(cause as Error).message}`, { cause });
      }
    }
    throw error;
  }
  const { [SHARED]: shared, ...own } = converted;
  const out: Record<string, JsonSchema> = {};
  for (const [key, schema] of Object.entries(own)) {
    const { $schema: _dialect, $id: _id, ...rest } = schema;
    out[key] = relink(rest) as JsonSchema;
  }
  for (const [key, schema] of Object.entries((shared?.definitions ?? {}) as Record<string, JsonSchema>)) out[key] = relink(schema) as JsonSchema;
  return out;
}

/** Points zod's `<uri>__shared#/definitions/<name>` refs at `#/components/schemas/<name>`. */
function relink(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(relink);
  if (typeof value !== 'object' || value === null) return value;
  const sharedRef = `${COMPONENT_SCHEMAS}${SHARED}#/definitions/`;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [
      k,
      k === '$ref' && typeof v === 'string' && v.startsWith(sharedRef) ? COMPONENT_SCHEMAS + v.slice(sharedRef.length) : relink(v),
    ]),
  );
}
