// The scaffold's checks on what it generates: identifiers that compile and are free, table names SQLite accepts,
// field specs with nothing dropped, and the places where a service name that is also a word names something else.
import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/entry/args.ts';
import { parseFields } from '../../scripts/new/fields.ts';
import { checkIdentifier, checkTable, declaredIn } from '../../scripts/new/identifiers.ts';
import { otherUses } from '../../scripts/new/rename-check.ts';

describe('scaffold names', () => {
  it('refuses reserved words and names the file already uses', () => {
    expect(() => checkIdentifier('delete', 'the context')).toThrow(UsageError);
    expect(() => checkIdentifier('eq', 'the subscriber', ['asc', 'eq'])).toThrow(/already uses/);
    expect(() => checkIdentifier('shipping', 'the subscriber', ['asc', 'eq'])).not.toThrow();
  });

  it('finds the declarations and imports of a file', () => {
    const source = `import { z } from 'zod';\nimport { type Foo, bar as baz } from './x.ts';\nexport const OrderPlacedV1 = 1;\nexport type T = 1;\nfunction f() {}`;
    expect([...declaredIn(source)].sort()).toEqual(['Foo', 'OrderPlacedV1', 'T', 'baz', 'f', 'z']);
  });

  it("refuses SQLite's own table names and the core's", () => {
    expect(() => checkTable('sqlite_x', ['inbox'], '--table')).toThrow(/sqlite_/);
    expect(() => checkTable('inbox', ['inbox'], '--table')).toThrow(UsageError);
    expect(() => checkTable('shipments', ['inbox'], '--table')).not.toThrow();
  });

  it('refuses a field spec with more than a name and a type', () => {
    expect(() => parseFields('a:string:int')).toThrow(/more than a name and a type/);
    expect(parseFields('a?:int')).toEqual([{ name: 'a', type: 'int', optional: true }]);
  });

  it('tells the service name from a route, a path, a table and a value spelled the same', () => {
    expect(otherUses('README.md', "subjects `hono-outbox.>`, image registry.example.com/hono-outbox:1.0.0, 'hono-outbox-reporting'", 'hono-outbox')).toEqual(
      [],
    );
    expect(otherUses('src/a.ts', "const x = 'orders'; // orders", 'orders')).toEqual([]);
    expect(otherUses('src/a.ts', "import { orders } from './contexts/orders/context.ts';", 'orders')).toEqual([
      'src/a.ts:1 (a value)',
      'src/a.ts:1 (a path or route segment)',
    ]);
    expect(otherUses('src/b.ts', "sql: 'UPDATE orders SET version = ?', basePath: '/orders'", 'orders')).toEqual([
      'src/b.ts:1 (a table)',
      'src/b.ts:1 (a path or route segment)',
    ]);
  });
});
