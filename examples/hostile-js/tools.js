// Hostile tools in JavaScript: what a StarlingMonkey guest can do to its host, and what the
// host must contain (built by `cargo xtask guests` into target/guests/hostile-js.wasm;
// host/tests/js_guest.rs runs each against the runtime's limits):
//
// - `hog(mb)` keeps allocating and filling 1 MiB buffers until it holds `mb` MiB.
// - `recurse()` calls itself without end.
// - `nest(depth)` builds arrays nested `depth` deep (without recursion) and stringifies
//   them, which recurses inside the engine.
// - `shout(mb)` returns a text of `mb` MiB.
// - `flood(count)` reports progress `count` times, as fast as it can.
// - `doomed(cleanup)` leaves `cleanup` as its note, reports progress once and spins until
//   it is stopped; its cleanup then throws ("throw"), spins forever ("spin") or recurses
//   without end ("recurse").
// - `echo(text)` returns the text: the well-behaved call that must still work after each.

import { defineTool, plugin, progress, setCleanupNote } from "cordon-guest";

const MIB = 1 << 20;

const integer = (description) => ({ type: "integer", minimum: 0, description });
const object = (properties) => ({ type: "object", properties, required: Object.keys(properties) });

function recurseForever(depth) {
  return recurseForever(depth + 1) + 1;
}

const echo = defineTool({
  name: "echo",
  description: "Returns the text it is given.",
  inputSchema: object({ text: { type: "string", description: "The text to return." } }),
  run: ({ text }) => text,
});

const hog = defineTool({
  name: "hog",
  description: "Allocates and fills 1 MiB buffers until it holds `mb` MiB.",
  inputSchema: object({ mb: integer("How many MiB to hold.") }),
  run({ mb }) {
    const blocks = [];
    for (let i = 0; i < mb; i++) {
      blocks.push(new Uint8Array(MIB).fill(0xa5));
    }
    return `held ${blocks.length} MiB`;
  },
});

const recurse = defineTool({
  name: "recurse",
  description: "Calls itself without end.",
  inputSchema: object({}),
  run: () => String(recurseForever(0)),
});

const nest = defineTool({
  name: "nest",
  description: "Builds arrays nested `depth` deep and returns the length of their JSON text.",
  inputSchema: object({ depth: integer("How deep.") }),
  run({ depth }) {
    let value = [];
    for (let i = 0; i < depth; i++) {
      value = [value];
    }
    return String(JSON.stringify(value).length);
  },
});

const shout = defineTool({
  name: "shout",
  description: "Returns a text of `mb` MiB.",
  inputSchema: object({ mb: integer("How many MiB.") }),
  run: ({ mb }) => "x".repeat(mb * MIB),
});

const flood = defineTool({
  name: "flood",
  description: "Reports progress `count` times, as fast as it can.",
  inputSchema: object({ count: integer("How many reports.") }),
  run({ count }) {
    for (let done = 1; done <= count; done++) {
      progress(done, count);
    }
    return `reported ${count} times`;
  },
});

const doomed = defineTool({
  name: "doomed",
  description: "Leaves `cleanup` as its note and spins until it is stopped.",
  inputSchema: object({ cleanup: { type: "string", description: 'What its cleanup does: "throw", "spin" or "recurse".' } }),
  run({ cleanup }) {
    setCleanupNote(cleanup);
    progress(0, undefined, "spinning"); // the note is left: a test may stop it now
    let state = 1;
    for (;;) {
      state = (state * 1103515245 + 12345) >>> 0;
    }
  },
});

export const tool = plugin({
  tools: [echo, hog, recurse, nest, shout, flood, doomed],
  cleanup({ noteText }) {
    if (noteText === "throw") {
      throw new Error("the cleanup gives up");
    } else if (noteText === "spin") {
      for (;;) {}
    } else if (noteText === "recurse") {
      recurseForever(0);
    }
  },
});
