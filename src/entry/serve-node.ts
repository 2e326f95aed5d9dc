import { getRequestListener, RequestError } from '@hono/node-server';
import { createServer } from 'node:http';
import { AppError } from '../errors.ts';
import { badRequestTarget, isUnbuildableRequest, problemResponse } from '../http/request-target.ts';
import { drainDeadline, httpPort, type Started } from './boot.ts';
import { answerParseErrorsAsProblems } from './parse-error-answer.ts';
import { requestsUnderWay } from './requests-under-way.ts';

/** Serves `started.service.app` with @hono/node-server when this process has a port; returns the close function. */
export function serveOnNode(started: Started): () => Promise<void> {
  const port = httpPort(started.config);
  if (port === undefined) return async () => undefined;
  // serve() as @hono/node-server builds it, plus an error handler (serve() takes none): what the adapter answers
  // itself, before the app runs (a path or Host header it cannot make a URL of), is problem+json too
  let stopping = false;
  const underWay = requestsUnderWay(async (request) => {
    const response = await started.service.app.fetch(request);
    // Node keeps a connection alive after an answer even once the server closes: a client would send its next request
    // on a connection about to be cut
    if (stopping) {
      try {
        response.headers.set('connection', 'close');
      } catch {
        // a response with immutable headers keeps its connection until the drain is over
      }
    }
    return response;
  });
  const listener = getRequestListener(underWay.fetch, {
    hostname: started.config.HOST,
    errorHandler: (error) => adapterProblem(error, started),
  });
  const server = createServer(listener);
  // Node's own 5 s is shorter than a load balancer's idle timeout: it would close connections the balancer reuses
  server.keepAliveTimeout = started.config.HTTP_KEEP_ALIVE_TIMEOUT_MS;
  answerParseErrorsAsProblems(server, started.config.SERVICE_NAME);
  server.listen(port, started.config.HOST, () => {
    const address = server.address();
    started.log.info('listening', { runtime: 'node', port: typeof address === 'object' && address ? address.port : port, roles: started.config.ROLES });
  });
  return async () => {
    stopping = true;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    // idle connections close at once, the others once their requests are answered or the drain is over
    server.closeIdleConnections();
    await Promise.race([closed, drainDeadline(started.config, underWay.ended)]);
    server.closeAllConnections();
    await closed;
  };
}

/** A request @hono/node-server could not build is a 400 problem; anything else thrown before the app answered, a 500. */
function adapterProblem(error: unknown, started: Started): Response {
  if (error instanceof RequestError || isUnbuildableRequest(error)) return problemResponse(badRequestTarget(), started.config.SERVICE_NAME);
  started.log.error('request failed in the HTTP adapter', { error });
  return problemResponse(new AppError(500, 'internal', 'Internal error', 'The request could not be processed.'), started.config.SERVICE_NAME);
}
