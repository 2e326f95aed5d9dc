// Name conventions of the generated code: kebab-case files and routes, camelCase values, PascalCase schemas,
// snake_case columns, and an event type derived from a command's verb.

/** Lower-case words joined by single dashes, starting with a letter: `ship`, `add-line`, `acme-shipping`. */
export const KEBAB = /^[a-z][a-z0-9]*(-[a-z0-9]+)*$/;

/** A versioned event type as the registry accepts it: `order.shipped.v1`. */
export const EVENT_TYPE = /^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.v\d+$/;

const words = (name: string) =>
  name
    .split(/[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])/)
    .filter(Boolean)
    .map((w) => w.toLowerCase());

/** `add-line` → `addLine`. */
export const camel = (name: string) =>
  words(name)
    .map((w, i) => (i === 0 ? w : w[0]!.toUpperCase() + w.slice(1)))
    .join('');

/** `order.shipped.v1` → `OrderShippedV1`. */
export const pascal = (name: string) =>
  words(name)
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join('');

/** `trackingNumber` → `tracking_number`. */
export const snake = (name: string) => words(name).join('_');

/** `trackingNumber` → `tracking-number`. */
export const kebab = (name: string) => words(name).join('-');

/** A context's aggregate from its plural name: `orders` → `order`, `categories` → `category`. */
export function singular(name: string): string {
  if (name.endsWith('ies')) return `${name.slice(0, -3)}y`;
  if (/(ss|sh|ch|x)es$/.test(name)) return name.slice(0, -2);
  if (name.endsWith('s') && !name.endsWith('ss')) return name.slice(0, -1);
  return name;
}

const IRREGULAR: Record<string, string> = {
  pay: 'paid',
  send: 'sent',
  buy: 'bought',
  sell: 'sold',
  make: 'made',
  hold: 'held',
  put: 'put',
  set: 'set',
  reset: 'reset',
  split: 'split',
};

/** The past participle of an English verb, by the regular rules and a few irregular verbs: ship → shipped. */
export function pastOf(verb: string): string {
  if (IRREGULAR[verb]) return IRREGULAR[verb];
  if (verb.endsWith('e')) return `${verb}d`;
  if (/[^aeiou]y$/.test(verb)) return `${verb.slice(0, -1)}ied`;
  const oneSyllable = (verb.match(/[aeiou]+/g) ?? []).length === 1;
  if (oneSyllable && /[^aeiou][aeiou][^aeiouwxy]$/.test(verb)) return `${verb}${verb.at(-1)}ed`;
  return `${verb}ed`;
}

/** The event a command publishes by default: `ship` on `order` → `order.shipped.v1`, `add-line` → `order.line-added.v1`. */
export function eventTypeOf(command: string, aggregate: string): string {
  const [verb, ...rest] = command.split('-');
  return `${aggregate}.${[...rest, pastOf(verb!)].join('-')}.v1`;
}
