// The published shape: the package resolves by its name through `exports`, and the built
// library imports nothing but openapi-fetch and its own modules (no Node built-ins), so it
// runs in edge runtimes and browsers as well as Node.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { test } from "node:test";

test("the package resolves by its name, with its types", async () => {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  const client = await import(pkg.name);
  assert.equal(typeof client.MemoryClient, "function");
  assert.equal(typeof client.ValidationError, "function");
  assert.ok(readFileSync(new URL(`../${pkg.exports["."].types}`, import.meta.url), "utf8").includes("MemoryClient"));
});

test("the library imports only openapi-fetch and its own modules", () => {
  const dist = new URL("../dist/", import.meta.url);
  const files = readdirSync(dist).filter((name) => name.endsWith(".js"));
  assert.ok(files.length >= 4, files.join(", "));
  const seen = new Set();
  for (const name of files) {
    const source = readFileSync(new URL(name, dist), "utf8");
    const imported = [...source.matchAll(/(?:^|\n)\s*(?:import|export)\b[^;]*?from\s+["']([^"']+)["']/g)].map((m) => m[1]);
    for (const specifier of imported) {
      seen.add(specifier);
      assert.ok(specifier === "openapi-fetch" || specifier.startsWith("./"), `${name} imports ${specifier}`);
    }
    assert.ok(!/\brequire\(|\bprocess\.|\bBuffer\b/.test(source), `${name} uses a Node-only global`);
  }
  assert.ok(seen.has("openapi-fetch") && seen.has("./errors.js"), [...seen].join(", "));
});
