// The rewrite that lets a handler's `async` functions run in the gateway
// (node only: build.mjs and the test harness use it; it is not part of a
// component). QuickJS under componentize-qjs never runs its own job queue
// in a synchronous call (src/promise.js), so
//
//   async function f(a) { const r = await fetch(u); return r.status; }
//
// becomes
//
//   function f(a) { return __weirAsync(function* () { const r = (yield fetch(u)); return r.status; }, this, arguments); }
//
// and every `Promise` the module names becomes `__weirPromise` (and
// `fetch`, `setTimeout`, `clearTimeout`, `setInterval`, `clearInterval`,
// `queueMicrotask`, `Response`, `Headers` their `__weir` forms): globals
// the SDK installs (src/index.js), so reactions run in the SDK's queue,
// drained inside each guest call, and the same module runs under node's
// test runner with the SDK's timers and fetch rather than node's. A name
// the module imports or declares at its top level is left alone. The
// rewrite edits the source text at the positions acorn reports and leaves
// everything else byte for byte.
//
// Refused with a message (the build fails): async generators, `for await`,
// and `super` inside an async method (a generator cannot reach it).
// `arguments` inside an async arrow function names the generator's own.

import * as acorn from "acorn";

/** Globals a handler names that the SDK provides (src/index.js GLOBALS). */
export const RENAMED = ["Promise", "fetch", "setTimeout", "clearTimeout", "setInterval", "clearInterval", "queueMicrotask", "Response", "Headers"];

/** What src/transform.mjs calls global `name` (src/index.js weirGlobal). */
export function weirName(name) {
  return `__weir${name[0].toUpperCase()}${name.slice(1)}`;
}

/** Names the module binds at its top level (imports and declarations). */
function topLevelNames(ast) {
  const out = new Set();
  const pattern = (p) => {
    if (!p) return;
    if (p.type === "Identifier") out.add(p.name);
    else if (p.type === "ObjectPattern") for (const q of p.properties) pattern(q.type === "RestElement" ? q.argument : q.value);
    else if (p.type === "ArrayPattern") for (const q of p.elements) pattern(q && q.type === "RestElement" ? q.argument : q);
    else if (p.type === "AssignmentPattern") pattern(p.left);
  };
  for (let node of ast.body) {
    if (node.type === "ImportDeclaration") {
      for (const spec of node.specifiers) out.add(spec.local.name);
      continue;
    }
    if ((node.type === "ExportNamedDeclaration" || node.type === "ExportDefaultDeclaration") && node.declaration) {
      node = node.declaration;
    }
    if ((node.type === "FunctionDeclaration" || node.type === "ClassDeclaration") && node.id) out.add(node.id.name);
    if (node.type === "VariableDeclaration") for (const d of node.declarations) pattern(d.id);
  }
  return out;
}

/** Parse `source` (an ES module) and rewrite it; returns the new text. */
export function transformModule(source, file = "module") {
  let ast;
  try {
    ast = acorn.parse(source, { ecmaVersion: "latest", sourceType: "module", allowHashBang: true });
  } catch (e) {
    throw new SyntaxError(`${file}: ${e.message}`);
  }
  const edits = [];
  const bound = topLevelNames(ast);
  const renames = new Set(RENAMED.filter((n) => !bound.has(n)));
  const fail = (node, what) => {
    const { line, column } = acorn.getLineInfo(source, node.start);
    throw new SyntaxError(`${file}:${line}:${column + 1}: ${what} is not supported in a weir handler`);
  };

  const visit = (node, parent, depth, asyncFn) => {
    if (node === null || typeof node !== "object") return;
    if (Array.isArray(node)) {
      for (const n of node) visit(n, parent, depth, asyncFn);
      return;
    }
    if (typeof node.type !== "string") return;
    let inner = asyncFn;
    switch (node.type) {
      case "FunctionDeclaration":
      case "FunctionExpression":
      case "ArrowFunctionExpression":
        if (node.async) {
          if (node.generator) fail(node, "an async generator");
          rewriteAsync(node, parent, depth);
          inner = node;
        } else {
          inner = node.type === "ArrowFunctionExpression" ? asyncFn : null;
        }
        break;
      case "AwaitExpression":
        if (asyncFn !== null) {
          edits.push({ pos: node.start, end: node.start + 5, text: "(yield", depth, prefix: true });
          edits.push({ pos: node.end, end: node.end, text: ")", depth, prefix: false });
        }
        break;
      case "ForOfStatement":
        if (node.await) fail(node, "`for await`");
        break;
      case "Super":
        if (asyncFn !== null) fail(node, "`super` inside an async method");
        break;
      case "Identifier":
        if (renames.has(node.name)) rename(node, parent, depth);
        break;
      default:
        break;
    }
    for (const key of Object.keys(node)) {
      if (key === "type" || key === "start" || key === "end" || key === "loc" || key === "range") continue;
      const child = node[key];
      if (child !== null && typeof child === "object") visit(child, node, depth + 1, inner);
    }
  };

  const rename = (node, parent, depth) => {
    const to = weirName(node.name);
    if (parent) {
      if (parent.type === "MemberExpression" && parent.property === node && !parent.computed) return;
      if (
        (parent.type === "Property" || parent.type === "MethodDefinition" || parent.type === "PropertyDefinition") &&
        parent.key === node &&
        !parent.computed
      ) {
        if (parent.type === "Property" && parent.shorthand) {
          edits.push({ pos: node.start, end: node.end, text: `${node.name}: ${to}`, depth, prefix: true });
        }
        return;
      }
      if (parent.type === "Property" && parent.shorthand && parent.value === node) return;
      if (parent.type === "LabeledStatement" || parent.type === "BreakStatement" || parent.type === "ContinueStatement") return;
      if (
        parent.type === "ImportSpecifier" ||
        parent.type === "ExportSpecifier" ||
        parent.type === "ImportDefaultSpecifier" ||
        parent.type === "ImportNamespaceSpecifier"
      ) {
        return;
      }
    }
    edits.push({ pos: node.start, end: node.end, text: to, depth, prefix: true });
  };

  const rewriteAsync = (fn, parent, depth) => {
    // Drop the `async` keyword: it opens the function's own text, or, for
    // a method (`async m() {}`), its Property or MethodDefinition's.
    const method = parent && parent.value === fn && ((parent.type === "Property" && parent.method) || parent.type === "MethodDefinition");
    const from = method ? parent.start : fn.start;
    const at = source.indexOf("async", from);
    if (at < 0 || at > fn.body.start) fail(fn, "this async function's form");
    edits.push({ pos: at, end: at + 5, text: "", depth, prefix: true });
    const self = fn.type === "ArrowFunctionExpression" ? "this" : "this, arguments";
    if (fn.body.type === "BlockStatement") {
      edits.push({ pos: fn.body.start + 1, end: fn.body.start + 1, text: " return __weirAsync(function* () {", depth, prefix: true });
      edits.push({ pos: fn.body.end - 1, end: fn.body.end - 1, text: `}, ${self}); `, depth, prefix: false });
    } else {
      edits.push({ pos: fn.body.start, end: fn.body.start, text: "__weirAsync(function* () { return (", depth, prefix: true });
      edits.push({ pos: fn.body.end, end: fn.body.end, text: `); }, ${self})`, depth, prefix: false });
    }
  };

  visit(ast, null, 0, null);
  if (edits.length === 0) return source;
  // Apply from the end backwards. At one position, suffixes (which close
  // what precedes it) go before prefixes in the text; among prefixes the
  // outer one comes first, among suffixes the inner one.
  edits.sort((a, b) => {
    if (a.pos !== b.pos) return b.pos - a.pos;
    if (a.prefix !== b.prefix) return a.prefix ? -1 : 1;
    return a.prefix ? b.depth - a.depth : a.depth - b.depth;
  });
  let out = source;
  for (const e of edits) out = out.slice(0, e.pos) + e.text + out.slice(e.end);
  return out;
}

/**
 * The module specifiers `source` imports or re-exports (static imports
 * only), as written.
 */
export function importsOf(source, file = "module") {
  let ast;
  try {
    ast = acorn.parse(source, { ecmaVersion: "latest", sourceType: "module", allowHashBang: true });
  } catch (e) {
    throw new SyntaxError(`${file}: ${e.message}`);
  }
  const out = [];
  for (const node of ast.body) {
    if (
      (node.type === "ImportDeclaration" || node.type === "ExportAllDeclaration" || node.type === "ExportNamedDeclaration") &&
      node.source
    ) {
      out.push({ spec: node.source.value, start: node.source.start, end: node.source.end });
    }
  }
  return out;
}
