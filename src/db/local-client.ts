// A @libsql/client `Client` for local files that prepares each statement once per connection. @libsql/client 0.18's
// local client (sqlite3.js) prepares on every execute and builds each row with Object.defineProperty per column,
// which costs a command about three times what the SQLite work does. This mirrors sqlite3.js call for call - same
// pool, transactions, ResultSets and LibsqlErrors - so drizzle and the rest of the code cannot tell them apart.
// Imported only by the Node/Bun/Deno entries (it loads the native `libsql` binding); Workers keep @libsql/client.
import type { Client, Config, InArgs, InStatement, IntMode, Replicated, ResultSet, Transaction, TransactionMode } from '@libsql/core/api';
import { LibsqlBatchError, LibsqlError } from '@libsql/core/api';
import { expandConfig, isInMemoryConfig } from '@libsql/core/config';
import { supportedUrlLink, transactionModeToBegin } from '@libsql/core/util';
import { LocalConnectionPool } from './local-connection-pool.ts';
import { LocalConnection, type LocalDatabaseOptions, type SchemaGeneration } from './statement-cache.ts';

/**
 * Opens a local database (`file:` URL, `:memory:` or `file::memory:`) as @libsql/client's createClient would, with
 * prepared statements cached per connection; throws URL_SCHEME_NOT_SUPPORTED for any other URL.
 */
export function createLocalClient(config: Config): Client {
  const expanded = expandConfig(config, true);
  if (expanded.scheme !== 'file') {
    throw new LibsqlError(
      `URL scheme ${JSON.stringify(`${expanded.scheme}:`)} is not supported by the local client. For more information, please read ${supportedUrlLink}`,
      'URL_SCHEME_NOT_SUPPORTED',
    );
  }
  const authority = expanded.authority;
  if (authority !== undefined) {
    const host = authority.host.toLowerCase();
    if (host !== '' && host !== 'localhost') {
      throw new LibsqlError(
        `Invalid host in file URL: ${JSON.stringify(authority.host)}. ` +
          'A "file:" URL with an absolute path should start with one slash ("file:/absolute/path.db") ' +
          'or with three slashes ("file:///absolute/path.db"). ' +
          `For more information, please read ${supportedUrlLink}`,
        'URL_INVALID',
      );
    }
    if (authority.port !== undefined) throw new LibsqlError('File URL cannot have a port', 'URL_INVALID');
    if (authority.userinfo !== undefined) throw new LibsqlError('File URL cannot have username and password', 'URL_INVALID');
  }
  const inMemory = isInMemoryConfig(expanded);
  if (inMemory && expanded.syncUrl) {
    throw new LibsqlError(`Embedded replica must use file for local db but URI with in-memory mode were provided instead: ${expanded.path}`, 'URL_INVALID');
  }
  // SQLite needs the scheme to read an in-memory URL's query parameters
  const path = inMemory ? `${expanded.scheme}:${expanded.path}` : expanded.path;
  // an in-memory database exists only on its one connection; each connection to a replica has its own sync state
  const maxConnections = inMemory || expanded.syncUrl ? 1 : Math.max(1, expanded.concurrency);
  const options: LocalDatabaseOptions = {
    authToken: expanded.authToken,
    encryptionKey: expanded.encryptionKey,
    remoteEncryptionKey: expanded.remoteEncryptionKey,
    syncUrl: expanded.syncUrl,
    syncPeriod: expanded.syncInterval,
    readYourWrites: expanded.readYourWrites,
    offline: expanded.offline,
    timeout: expanded.timeout,
  };
  const schema: SchemaGeneration = { value: 0 };
  const pool = new LocalConnectionPool(() => new LocalConnection(path, options, schema), maxConnections);
  // fail fast if the database cannot be opened at all
  const conn = pool.acquireSync();
  try {
    conn.execute('SELECT 1 AS checkThatTheDatabaseCanBeOpened', expanded.intMode);
  } catch (error) {
    pool.close();
    throw error;
  }
  pool.release(conn);
  return new LocalClient(pool, expanded.intMode);
}

const normalize = (stmtOrSql: InStatement, args?: InArgs): InStatement => (typeof stmtOrSql === 'string' ? { sql: stmtOrSql, args: args || [] } : stmtOrSql);

/** A LibsqlError as the LibsqlBatchError naming statement `index`, as sqlite3.js reports a failed batch statement. */
function batchError(error: unknown, index: number): unknown {
  if (error instanceof LibsqlBatchError) return error;
  if (error instanceof LibsqlError) {
    return new LibsqlBatchError(error.message, index, error.code, error.extendedCode, error.rawCode, error.cause instanceof Error ? error.cause : undefined);
  }
  return error;
}

const transactionRolledBack = (index: number) => new LibsqlBatchError('The transaction has been rolled back', index, 'TRANSACTION_CLOSED');

class LocalClient implements Client {
  readonly #pool: LocalConnectionPool;
  readonly #intMode: IntMode;
  closed = false;
  readonly protocol = 'file';

  constructor(pool: LocalConnectionPool, intMode: IntMode) {
    this.#pool = pool;
    this.#intMode = intMode;
  }

  execute(stmt: InStatement): Promise<ResultSet>;
  execute(sql: string, args?: InArgs): Promise<ResultSet>;
  async execute(stmtOrSql: InStatement, args?: InArgs): Promise<ResultSet> {
    const stmt = normalize(stmtOrSql, args);
    this.#checkNotClosed();
    const conn = await this.#pool.acquire();
    try {
      this.#checkUsable(conn);
      return conn.execute(stmt, this.#intMode);
    } finally {
      this.#pool.release(conn);
    }
  }

  async batch(stmts: Array<InStatement | [string, InArgs?]>, mode: TransactionMode = 'deferred'): Promise<ResultSet[]> {
    this.#checkNotClosed();
    const conn = await this.#pool.acquire();
    try {
      this.#checkUsable(conn);
      conn.control(transactionModeToBegin(mode));
      const resultSets: ResultSet[] = [];
      for (let i = 0; i < stmts.length; i++) {
        try {
          if (!conn.inTransaction) throw transactionRolledBack(i);
          const stmt = stmts[i]!;
          resultSets.push(conn.execute(Array.isArray(stmt) ? { sql: stmt[0], args: stmt[1] || [] } : stmt, this.#intMode));
        } catch (error) {
          throw batchError(error, i);
        }
      }
      conn.control('COMMIT');
      return resultSets;
    } finally {
      // release rolls back anything still open
      this.#pool.release(conn);
    }
  }

  async migrate(stmts: InStatement[]): Promise<ResultSet[]> {
    this.#checkNotClosed();
    const conn = await this.#pool.acquire();
    try {
      this.#checkUsable(conn);
      conn.control('PRAGMA foreign_keys=off');
      conn.control(transactionModeToBegin('deferred'));
      const resultSets: ResultSet[] = [];
      for (let i = 0; i < stmts.length; i++) {
        try {
          if (!conn.inTransaction) throw transactionRolledBack(i);
          resultSets.push(conn.execute(stmts[i]!, this.#intMode));
        } catch (error) {
          throw batchError(error, i);
        }
      }
      conn.control('COMMIT');
      return resultSets;
    } finally {
      if (conn.inTransaction) conn.control('ROLLBACK');
      conn.control('PRAGMA foreign_keys=on');
      this.#pool.release(conn);
    }
  }

  transaction(mode?: TransactionMode): Promise<Transaction>;
  transaction(): Promise<Transaction>;
  async transaction(mode: TransactionMode = 'write'): Promise<Transaction> {
    this.#checkNotClosed();
    const conn = await this.#pool.acquire(true);
    try {
      this.#checkUsable(conn);
      conn.control(transactionModeToBegin(mode));
    } catch (error) {
      this.#pool.release(conn);
      throw error;
    }
    // the transaction owns this connection until it settles
    return new LocalTransaction(conn, this.#intMode, (used) => this.#pool.release(used));
  }

  async executeMultiple(sql: string): Promise<void> {
    this.#checkNotClosed();
    const conn = await this.#pool.acquire();
    try {
      this.#checkUsable(conn);
      conn.executeMultiple(sql);
    } finally {
      // release rolls back a transaction `sql` left open
      this.#pool.release(conn);
    }
  }

  async sync(): Promise<Replicated> {
    this.#checkNotClosed();
    const conn = await this.#pool.acquire();
    try {
      this.#checkUsable(conn);
      const rep = await conn.sync();
      return { frames_synced: rep.frames_synced, frame_no: rep.frame_no };
    } finally {
      this.#pool.release(conn);
    }
  }

  async reconnect(): Promise<void> {
    this.#pool.reopen();
    this.closed = false;
  }

  close(): void {
    this.closed = true;
    this.#pool.close();
  }

  #checkNotClosed(): void {
    if (this.closed) throw new LibsqlError('The client is closed', 'CLIENT_CLOSED');
  }

  // close() and reconnect() are synchronous and can land between a borrow and its use
  #checkUsable(conn: LocalConnection): void {
    this.#checkNotClosed();
    if (!conn.open) throw new LibsqlError('The connection was closed while this operation was in flight', 'CLIENT_CLOSED');
  }
}

class LocalTransaction implements Transaction {
  // null once the connection went back to the pool
  #conn: LocalConnection | null;
  readonly #intMode: IntMode;
  readonly #release: (conn: LocalConnection) => void;

  constructor(conn: LocalConnection, intMode: IntMode, release: (conn: LocalConnection) => void) {
    this.#conn = conn;
    this.#intMode = intMode;
    this.#release = release;
  }

  execute(stmt: InStatement): Promise<ResultSet>;
  execute(sql: string, args?: InArgs): Promise<ResultSet>;
  async execute(stmtOrSql: InStatement, args?: InArgs): Promise<ResultSet> {
    const stmt = normalize(stmtOrSql, args);
    return this.#connection().execute(stmt, this.#intMode);
  }

  async batch(stmts: Array<InStatement | [string, InArgs?]>): Promise<ResultSet[]> {
    const resultSets: ResultSet[] = [];
    for (let i = 0; i < stmts.length; i++) {
      try {
        const conn = this.#connection();
        const stmt = stmts[i]!;
        resultSets.push(conn.execute(Array.isArray(stmt) ? { sql: stmt[0], args: stmt[1] || [] } : stmt, this.#intMode));
      } catch (error) {
        throw batchError(error, i);
      }
    }
    return resultSets;
  }

  async executeMultiple(sql: string): Promise<void> {
    this.#connection().executeMultiple(sql);
  }

  async rollback(): Promise<void> {
    const conn = this.#conn;
    if (conn === null || !conn.open) {
      this.#settle();
      return;
    }
    try {
      this.#checkNotClosed();
      conn.control('ROLLBACK');
    } finally {
      this.#settle();
    }
  }

  async commit(): Promise<void> {
    try {
      this.#connection().control('COMMIT');
    } finally {
      this.#settle();
    }
  }

  close(): void {
    const conn = this.#conn;
    if (conn === null) return;
    try {
      if (conn.inTransaction) conn.control('ROLLBACK');
    } finally {
      this.#settle();
    }
  }

  get closed(): boolean {
    const conn = this.#conn;
    return conn === null || !conn.inTransaction;
  }

  // Idempotent, so every exit path can call it.
  #settle(): void {
    const conn = this.#conn;
    if (conn === null) return;
    this.#conn = null;
    this.#release(conn);
  }

  #connection(): LocalConnection {
    this.#checkNotClosed();
    return this.#conn!;
  }

  #checkNotClosed(): void {
    if (this.closed) throw new LibsqlError('The transaction is closed', 'TRANSACTION_CLOSED');
  }
}
