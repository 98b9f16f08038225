// Parse Mermaid documents with mermaid's own parser (no browser needed: jsdom stands in
// for the DOM).  Usage: node mermaid_parse.mjs NODE_MODULES_DIR < input
// where input is a JSON list of diagram texts.  Prints a JSON list of
// {ok, type?, error?}, one per diagram.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import path from "node:path";

const modules = path.resolve(process.argv[2]);
const require = createRequire(path.join(modules, "noop.js"));
const { JSDOM } = require("jsdom");
const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import(pathToFileURL(require.resolve("mermaid")).href);

let text = "";
for await (const chunk of process.stdin) text += chunk;
const results = [];
for (const diagram of JSON.parse(text)) {
  try {
    const parsed = await mermaid.parse(diagram);
    results.push({ ok: true, type: parsed.diagramType });
  } catch (e) {
    results.push({ ok: false, error: String((e && e.message) || e) });
  }
}
console.log(JSON.stringify(results));
