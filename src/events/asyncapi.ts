import type { Modules } from '../compose/define-modules.ts';
import type { Subscriber } from '../inbox/subscriber.ts';
import { durableNameOf } from '../service-name.ts';
import { eventJsonSchemas, headersSchemaKey, payloadSchemaKey, type JsonSchema } from './event-json-schemas.ts';

/** An AsyncAPI 3.0 document as plain data, ready for JSON or YAML. */
export type AsyncApiDocument = {
  asyncapi: '3.0.0';
  info: { title: string; version: string; description: string };
  defaultContentType: 'application/json';
  servers: Record<string, Record<string, unknown>>;
  channels: Record<string, Record<string, unknown>>;
  operations: Record<string, Record<string, unknown>>;
  components: { messages: Record<string, Record<string, unknown>>; schemas: Record<string, JsonSchema> };
};

/** What the document says beyond the catalog. */
export type DescribeEventsOptions = {
  /** The service's name: the document's title and the durable consumers' `<service>-<subscriber>`. */
  service: string;
  /**
   * info.version; default 1.0.0. Not the package's version on purpose: each event type carries its own (`.v1`), and
   * the committed document should not go stale at every release.
   */
  version?: string;
  /** EVENTS_SUBJECT_PREFIX; default: the service's name. */
  prefix?: string;
  /** NATS_URL (comma-separated URLs); credentials in it are left out. Without it the host is a server variable. */
  natsUrl?: string;
  /** The subscribers described as receive operations; default: the composition's. */
  subscribers?: readonly Pick<Subscriber, 'name' | 'types'>[];
};

/** A channel, operation or component key: the AsyncAPI key alphabet, anything else as `_`. */
const keyOf = (name: string) => name.replace(/[^\w.-]/g, '_');
const ref = (pointer: string) => ({ $ref: pointer });

/**
 * Describes the events of a composition as an AsyncAPI 3.0 document: the NATS server; one channel per aggregate type
 * (`<prefix>.<aggregate>.{aggregateId}.{partition}`) carrying its event types as messages (payload = the integration event
 * envelope with `data` by the type's schema, headers as the relay sets them); a send operation per channel (this
 * service publishes) and a receive operation per subscriber and channel with the types it applies. Throws RangeError
 * for an event schema with no JSON Schema form.
 */
export function describeEvents(modules: Pick<Modules, 'events'> & Partial<Pick<Modules, 'subscribers'>>, options: DescribeEventsOptions): AsyncApiDocument {
  const prefix = options.prefix ?? options.service;
  const byAggregate = new Map<string, string[]>();
  for (const [type, def] of Object.entries(modules.events)) byAggregate.set(def.aggregate, [...(byAggregate.get(def.aggregate) ?? []), type]);

  const channels: AsyncApiDocument['channels'] = {};
  const operations: AsyncApiDocument['operations'] = {};
  const messages: AsyncApiDocument['components']['messages'] = {};
  const messageRefs = (aggregate: string, types: readonly string[]) => types.map((t) => ref(`#/channels/${keyOf(aggregate)}/messages/${keyOf(t)}`));

  for (const [aggregate, types] of byAggregate) {
    const channel = keyOf(aggregate);
    channels[channel] = {
      address: `${prefix}.${aggregate}.{aggregateId}.{partition}`,
      title: `${aggregate} events`,
      description: `The events of \`${aggregate}\` aggregates, one subject per aggregate: a subscriber of one subject gets its events in aggregateVersion order.`,
      parameters: {
        aggregateId: { description: 'The aggregate the events belong to.', location: '$message.payload#/aggregateId' },
        partition: {
          description:
            "The aggregate's outbox partition: FNV-1a 32-bit hash of aggregateType, a NUL byte and aggregateId (UTF-8), modulo the service's partition count. A subscriber may filter one partition (`<prefix>.<aggregate>.*.<partition>`).",
        },
      },
      messages: Object.fromEntries(types.map((t) => [keyOf(t), ref(`#/components/messages/${keyOf(t)}`)])),
    };
    operations[`send.${channel}`] = {
      action: 'send',
      channel: ref(`#/channels/${channel}`),
      title: `Publish ${aggregate} events`,
      description:
        `${options.service} stores each event with its state change in one transaction and publishes it afterwards, at least once ` +
        'and in order per aggregate; Nats-Msg-Id (the eventId) lets JetStream drop repeats within its duplicate window.',
      messages: messageRefs(aggregate, types),
    };
    for (const type of types) {
      const data = modules.events[type]!.data;
      messages[keyOf(type)] = {
        name: type,
        title: type,
        ...(data.description ? { summary: data.description } : {}),
        contentType: 'application/json',
        headers: ref(`#/components/schemas/${headersSchemaKey(type)}`),
        payload: ref(`#/components/schemas/${payloadSchemaKey(type)}`),
      };
    }
  }

  for (const subscriber of options.subscribers ?? modules.subscribers ?? []) {
    for (const [aggregate, types] of byAggregate) {
      const handled = types.filter((t) => subscriber.types.includes(t));
      if (handled.length === 0) continue;
      const channel = keyOf(aggregate);
      operations[`receive.${keyOf(subscriber.name)}.${channel}`] = {
        action: 'receive',
        channel: ref(`#/channels/${channel}`),
        title: `${subscriber.name} applies ${aggregate} events`,
        description:
          `Durable JetStream consumer \`${durableNameOf(options.service, subscriber.name)}\` on \`${prefix}.${aggregate}.>\`: applies ` +
          `${handled.join(', ')} once each through its inbox; other types on the channel are acknowledged untouched.`,
        messages: messageRefs(aggregate, handled),
      };
    }
  }

  return {
    asyncapi: '3.0.0',
    info: {
      title: options.service,
      version: options.version ?? '1.0.0',
      description: `The integration events ${options.service} publishes on NATS JetStream, and the ones its subscribers apply.`,
    },
    defaultContentType: 'application/json',
    servers: serversOf(options.natsUrl),
    channels,
    operations,
    components: { messages, schemas: eventJsonSchemas(modules.events) },
  };
}

/** One server per URL of `natsUrl`, without credentials; none given: a `{host}` variable. */
function serversOf(natsUrl: string | undefined): AsyncApiDocument['servers'] {
  const hosts = (natsUrl ?? '')
    .split(',')
    .map((u) => u.trim())
    .filter(Boolean)
    .map((u) => (URL.canParse(u) ? new URL(u).host : ''));
  if (hosts.length === 0 || hosts.some((h) => !h)) {
    return {
      nats: {
        host: '{host}',
        protocol: 'nats',
        description: 'The NATS server (NATS_URL) with JetStream.',
        variables: { host: { default: '127.0.0.1:4222', description: 'host:port of NATS_URL' } },
      },
    };
  }
  return Object.fromEntries(
    hosts.map((host, i) => [i === 0 ? 'nats' : `nats-${i + 1}`, { host, protocol: 'nats', description: 'The NATS server (NATS_URL) with JetStream.' }]),
  );
}
