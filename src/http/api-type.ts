import type { Hono } from 'hono';
import type { BlankEnv, MergeSchemaPath, Schema } from 'hono/types';
import type { Context } from './define-context.ts';

type RoutesOf<C> = C extends { basePath: infer B extends string; routes: (...args: never[]) => Hono<any, infer S extends Schema, any> }
  ? MergeSchemaPath<S, B>
  : never;
type Intersection<U> = (U extends unknown ? (u: U) => void : never) extends (i: infer I) => void ? I : never;

/**
 * The type of a service's HTTP API from its contexts (`ApiOf<[typeof orders]>`), each at its basePath, for a typed
 * client: `hc<ApiOf<[typeof orders]>>(baseUrl)` (hono/client) knows every command's body and every path parameter.
 */
export type ApiOf<Contexts extends readonly Context[]> =
  Intersection<RoutesOf<Contexts[number]>> extends infer S extends Schema ? Hono<BlankEnv, S, '/'> : Hono;
