/** Text libSQL would not give back as sent, by what makes it so: for tests of safeText fields and of the outbox. */
export const UNSAFE_TEXT: Array<[label: string, text: string]> = [
  ['a NUL', 'acme\u0000x'],
  ['a tab', 'acme\tx'],
  ['a line feed', 'acme\nx'],
  ['DEL', 'acme\u007fx'],
  ['a C1 control (NEL)', 'acme\u0085x'],
  ['a lone high surrogate', 'acme\ud800x'],
  ['a lone low surrogate', '\udc00acme'],
  ['a surrogate pair reversed', 'acme\ude00\ud83dx'],
];
