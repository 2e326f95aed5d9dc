/**
 * The service's name, the one setting a clone renames (`npm run new -- rename <name>` changes it here and in
 * package.json). It names the log lines, the problem-type URIs, the NATS connections, the stream
 * (`HONO_OUTBOX`), its subject prefix (`hono-outbox.`) and the durable consumers (`hono-outbox-reporting`); each
 * can still be set on its own (SERVICE_NAME, NATS_STREAM, EVENTS_SUBJECT_PREFIX).
 */
export const DEFAULT_SERVICE_NAME = 'hono-outbox';

/** The stream a service publishes to by default: its name in upper case, `-` as `_`. */
export const streamNameOf = (service: string) => service.toUpperCase().replace(/[^A-Z0-9_]/g, '_');

/** A subscriber's durable consumer name: `<service>-<subscriber>`, unique among the consumers of a shared stream. */
export const durableNameOf = (service: string, subscriber: string) => `${service}-${subscriber}`;
