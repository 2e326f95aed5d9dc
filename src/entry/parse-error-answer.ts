// What a Node HTTP server answers for a request its own parser refuses (a malformed request line or header, a
// Content-Length that is no number or contradicts itself, an unknown method, a header block too large, an
// Expect it cannot meet): Node writes a bare status line for these before any JavaScript sees a request. A CONNECT
// request never reaches the request listener either: without a 'connect' listener Node closes its socket unanswered.
// Node-only, like the entry that installs it.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { AppError, toProblem } from '../errors.ts';

/** The status Node itself would answer a parser error with (431 header overflow, 413, 408 timeout; 400 otherwise). */
function statusOf(code: string | undefined): number {
  if (code === 'HPE_HEADER_OVERFLOW') return 431;
  if (code === 'HPE_CHUNK_EXTENSIONS_OVERFLOW') return 413;
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return 408;
  return 400;
}

/** Each status Node's parser errors are answered with: problem code, title, detail and the status line's reason. */
const ANSWERS: Record<number, [string, string, string, string]> = {
  400: ['bad-request', 'Bad request', 'The request is not valid HTTP/1.1 (its request line, a header or its framing).', 'Bad Request'],
  408: ['request-timeout', 'Request timeout', 'The request did not arrive in time.', 'Request Timeout'],
  413: ['payload-too-large', 'Payload too large', 'A chunk extension is too large.', 'Payload Too Large'],
  417: ['expectation-failed', 'Expectation failed', 'The only expectation this service meets is Expect: 100-continue.', 'Expectation Failed'],
  431: ['request-header-fields-too-large', 'Request header fields too large', 'The request header block is too large.', 'Request Header Fields Too Large'],
  501: ['not-implemented', 'Not implemented', 'This service is no proxy: it does not implement the CONNECT method.', 'Not Implemented'],
};

/** The problem+json body answering a request refused with `status`. */
function problemBody(status: number, service: string): string {
  const [code, title, detail] = ANSWERS[status] ?? ANSWERS[400]!;
  return JSON.stringify(toProblem(new AppError(status, code, title, detail), undefined, service));
}

/** The raw HTTP/1.1 response carrying `status` as problem+json, closing the connection. */
function parseErrorResponse(status: number, service: string): string {
  const body = problemBody(status, service);
  return `HTTP/1.1 ${status} ${(ANSWERS[status] ?? ANSWERS[400]!)[3]}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}

/**
 * Makes `server` answer what its parser refuses, and an Expect it cannot meet, with problem+json instead of Node's
 * bare status lines, and a CONNECT request with a 501 instead of a closed socket; a connection that is already gone
 * or mid-response is only closed.
 */
export function answerParseErrorsAsProblems(server: Server, service: string): void {
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    const responding = (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
    if (error.code === 'ECONNRESET' || !socket.writable || responding) {
      socket.destroy();
      return;
    }
    // closed once answered: the server no longer tracks this socket, and lets its reading side stay open
    socket.end(parseErrorResponse(statusOf(error.code), service), () => socket.destroy());
  });
  // RFC 9110 §15.6.2: 501 for a method the server supports for no resource
  server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    if (socket.writable) socket.end(parseErrorResponse(501, service), () => socket.destroy());
    else socket.destroy();
  });
  server.on('checkExpectation', (_req: IncomingMessage, res: ServerResponse) => {
    const body = problemBody(417, service);
    res.writeHead(417, { 'Content-Type': 'application/problem+json', 'Content-Length': Buffer.byteLength(body), Connection: 'close' });
    res.end(body);
  });
}
