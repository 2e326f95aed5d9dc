// The connection pool of the local-file client: @libsql/client 0.18's ConnectionPool (sqlite3.js), over connections
// that keep their prepared statements.
import { LibsqlError } from '@libsql/core/api';
import type { LocalConnection } from './statement-cache.ts';

type Waiter = { resolve: (conn: LocalConnection) => void; reject: (error: unknown) => void };

const clientClosed = () => new LibsqlError('The client is closed', 'CLIENT_CLOSED');

/**
 * Up to `maxConnections` connections to one database. Every client call borrows one for its (synchronous) duration;
 * a transaction borrows one until it settles. The connection released last is handed out next, which the writer's
 * connection PRAGMAs rely on (write-lock.ts, beginWrite).
 */
export class LocalConnectionPool {
  readonly #open: () => LocalConnection;
  readonly #maxConnections: number;
  #idle: LocalConnection[] = [];
  readonly #borrowed = new Set<LocalConnection>();
  // the subset of `#borrowed` held by an open transaction
  readonly #heldByTransaction = new Set<LocalConnection>();
  #waiters: Waiter[] = [];
  #closed = false;

  /** A pool that opens connections with `open`, at most `maxConnections` at a time. */
  constructor(open: () => LocalConnection, maxConnections: number) {
    this.#open = open;
    this.#maxConnections = maxConnections;
  }

  /**
   * Borrows a connection, waiting for a release at the limit. When open transactions hold every connection nothing
   * would be released until the caller acts, so that rejects with TRANSACTION_ACTIVE instead of hanging.
   */
  acquire(forTransaction = false): Promise<LocalConnection> {
    if (!this.#closed && this.#atLimit()) {
      if (this.#heldByTransaction.size >= this.#maxConnections) {
        return Promise.reject(
          new LibsqlError(
            this.#maxConnections === 1
              ? 'This client has a single connection, which an open transaction is holding. ' +
                  'In-memory databases and embedded replicas cannot have more than one. ' +
                  'Commit or roll back the transaction before using the client again.'
              : `All ${this.#maxConnections} of this client's connections are held by open transactions. ` +
                  'Commit or roll back one before using the client again, or raise `concurrency`.',
            'TRANSACTION_ACTIVE',
          ),
        );
      }
      return new Promise((resolve, reject) =>
        this.#waiters.push({
          resolve: (conn) => {
            if (forTransaction) this.#heldByTransaction.add(conn);
            resolve(conn);
          },
          reject,
        }),
      );
    }
    try {
      return Promise.resolve(this.acquireSync(forTransaction));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Borrows a connection without waiting; only for when the pool cannot be at its limit (the opening probe). */
  acquireSync(forTransaction = false): LocalConnection {
    if (this.#closed) throw clientClosed();
    const conn = this.#idle.pop() ?? this.#open();
    this.#borrowed.add(conn);
    if (forTransaction) this.#heldByTransaction.add(conn);
    return conn;
  }

  /**
   * Takes a connection back: rolled back if a transaction is still open (the next borrower must not inherit it),
   * closed if it is tainted or the pool closed, else handed to the first waiter or kept idle.
   */
  release(conn: LocalConnection): void {
    this.#borrowed.delete(conn);
    this.#heldByTransaction.delete(conn);
    if (conn.inTransaction) {
      try {
        conn.control('ROLLBACK');
      } catch {
        this.#discard(conn);
        return;
      }
    }
    if (this.#closed || !conn.open || conn.tainted) {
      this.#discard(conn);
      return;
    }
    const waiter = this.#waiters.shift();
    if (waiter !== undefined) {
      this.#borrowed.add(conn);
      waiter.resolve(conn);
    } else {
      this.#idle.push(conn);
    }
  }

  /** Closes every connection, borrowed ones included, and rejects whoever waits for one with CLIENT_CLOSED. */
  close(): void {
    this.#closed = true;
    for (const conn of this.#idle) conn.close();
    this.#idle = [];
    for (const conn of this.#borrowed) conn.close();
    this.#borrowed.clear();
    this.#heldByTransaction.clear();
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const waiter of waiters) waiter.reject(clientClosed());
  }

  /** Closes every connection (and their statements) and accepts borrowers again; new ones get fresh connections. */
  reopen(): void {
    this.close();
    this.#closed = false;
  }

  // A discarded connection frees a place: a waiter gets a fresh connection rather than waiting for a release that
  // may never come (sqlite3.js leaves it waiting).
  #discard(conn: LocalConnection): void {
    conn.close();
    if (this.#closed) return;
    const waiter = this.#waiters.shift();
    if (waiter === undefined) return;
    let fresh: LocalConnection;
    try {
      fresh = this.#open();
    } catch (error) {
      waiter.reject(error);
      return;
    }
    this.#borrowed.add(fresh);
    waiter.resolve(fresh);
  }

  #atLimit(): boolean {
    return this.#idle.length === 0 && this.#borrowed.size >= this.#maxConnections;
  }
}
