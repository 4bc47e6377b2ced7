// Node module hooks for the test harness (src/testing.mjs registers them):
// a handler module, and every module it imports outside node_modules and
// the SDK itself, is loaded through src/transform.mjs, as build.mjs builds
// it, so its async hooks and timers run on the SDK's queue under `node
// --test` exactly as in the gateway. `weir-guest` resolves to the SDK.

import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { transformModule } from "./transform.mjs";

const sdk = new URL("./", import.meta.url).href;

/** Bare names a handler may import the SDK by. */
const ALIASES = {
  "weir-guest": new URL("./index.js", import.meta.url).href,
  "weir-guest/testing": new URL("./testing.mjs", import.meta.url).href,
};

export async function resolve(specifier, context, next) {
  const alias = ALIASES[specifier];
  if (alias) return { url: alias, shortCircuit: true };
  return next(specifier, context);
}

export async function load(url, context, next) {
  const plain = url.split(/[?#]/)[0];
  if (
    plain.startsWith("file:") &&
    /\.m?js$/.test(plain) &&
    !plain.startsWith(sdk) &&
    !plain.includes("/node_modules/")
  ) {
    const path = fileURLToPath(plain);
    const source = await readFile(path, "utf8");
    return { format: "module", source: transformModule(source, path), shortCircuit: true };
  }
  return next(url, context);
}
