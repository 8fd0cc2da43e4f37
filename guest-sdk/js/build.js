#!/usr/bin/env node
// Build a Cordon tool component from a JavaScript entry module:
//
//   node build.js <entry.js> <out.wasm>
//
// 1. rolldown bundles the entry with everything it imports (its own modules, npm packages,
//    and `cordon-guest`, which always resolves to this folder's index.js) into one ES
//    module; the `cordon:` and `wasi:` imports stay imports of the component.
// 2. componentize-js runs that module in StarlingMonkey, snapshots the initialised engine
//    (wizer) and wraps it as a component of the `cordon:tool/plugin` world (wit/).
//
// The component's WASI use is cut to what the host serves a tool: stdio (console.error's
// stderr goes to the operator's log; console.log's stdout is discarded), random, clocks.
// No fetch(): Cordon's HTTP grants are made for the Rust SDK's client, and
// StarlingMonkey's fetch needs wasi:http's incoming side.

import { mkdtemp, rm, stat, writeFile, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** rolldown's floor (componentize-js needs Node 20 too). */
const NODE_MIN = [20, 19];

const sdk = dirname(fileURLToPath(import.meta.url));

async function main(argv) {
  if (argv.length !== 2 || argv[0].startsWith("-")) {
    console.error("usage: node build.js <entry.js> <out.wasm>");
    return 2;
  }
  const [major, minor] = process.versions.node.split(".").map(Number);
  if (major < NODE_MIN[0] || (major === NODE_MIN[0] && minor < NODE_MIN[1])) {
    console.error(
      `cordon-guest: Node ${NODE_MIN.join(".")} or newer is needed to build, this is ${process.versions.node} ` +
        "(npm install node@22 brings one into node_modules/.bin)",
    );
    return 1;
  }
  const entry = resolve(argv[0]);
  const out = resolve(argv[1]);
  const started = Date.now();
  const work = await mkdtemp(join(tmpdir(), "cordon-js-"));
  try {
    const bundle = join(work, "tool.js");
    await bundleEntry(entry, bundle);
    const { componentize } = await import("@bytecodealliance/componentize-js");
    const { component } = await componentize({
      sourcePath: bundle,
      witPath: join(sdk, "wit"),
      worldName: "plugin",
      disableFeatures: ["http", "fetch-event"],
    });
    await mkdir(dirname(out), { recursive: true });
    await writeFile(out, component);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  const { size } = await stat(out);
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`${out} (${(size / (1 << 20)).toFixed(1)} MiB, built in ${seconds} s)`);
  return 0;
}

async function bundleEntry(entry, bundle) {
  const { build } = await import("rolldown");
  try {
    await build({
      input: entry,
      platform: "neutral",
      external: [/^cordon:/, /^wasi:/],
      resolve: { alias: { "cordon-guest": join(sdk, "index.js") } },
      logLevel: "warn",
      output: { file: bundle, format: "esm", codeSplitting: false },
    });
  } catch (error) {
    throw new Error(`bundling ${entry} failed: ${error.message}`);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error) => {
    console.error(`cordon-guest: ${error.message}`);
    process.exit(1);
  },
);
