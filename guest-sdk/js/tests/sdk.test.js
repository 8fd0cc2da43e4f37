// The JavaScript SDK natively, through its test host: run with
// `node --import ./testing/register.js --test tests/` from guest-sdk/js (`cargo xtask test`
// does).

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CallResult,
  Cancelled,
  ToolError,
  checkCancelled,
  clearCleanupNote,
  defineTool,
  log,
  plugin,
  progress,
  setCleanupNote,
  sleep,
  timeLeft,
} from "cordon-guest";
import { STOP_REASONS, TestHost } from "cordon-guest/testing";

const steps = defineTool({
  name: "steps",
  description: "Counts to `count`, reporting progress and leaving its name as the note.",
  inputSchema: {
    properties: {
      name: { type: "string" },
      count: { type: "integer", default: 3 },
      step_ms: { type: "integer", default: 0 },
    },
    required: ["name"],
  },
  async run({ name, count, step_ms }) {
    setCleanupNote(name);
    for (let done = 1; done <= count; done++) {
      checkCancelled();
      await sleep(step_ms);
      progress(done, count, `step ${done}`);
    }
    clearCleanupNote();
    return `counted to ${count} for ${name}`;
  },
});

const shapes = defineTool({
  name: "shapes",
  description: "Returns the result shape it is asked for.",
  inputSchema: { properties: { shape: { type: "string" } }, required: ["shape"] },
  outputSchema: { type: "object", properties: { n: { type: "integer" } } },
  run({ shape }) {
    switch (shape) {
      case "object":
        return { n: 7 };
      case "content":
        return new CallResult({
          content: [
            { type: "text", text: "a" },
            { type: "image", data: new Uint8Array([1, 2]), mimeType: "image/png" },
            { type: "resource_link", uri: "file:///a", name: "a" },
          ],
          isError: true,
        });
      case "time":
        return String(timeLeft());
      case "tool-error":
        throw new ToolError("the index is corrupt");
      default:
        throw new RangeError(`no shape ${shape}`);
    }
  },
});

let cleanups = [];

const tool = plugin({
  tools: [steps, shapes],
  cleanup(context) {
    cleanups.push(context);
    log("info", `rolled back ${context.noteText}`);
    if (context.noteText === "fragile") {
      throw new Error("the disk is gone");
    }
  },
});

test("a call resolves to the result the client reads, with its progress and defaults", async () => {
  const host = new TestHost(tool);
  const result = await host.call("steps", { name: "books" });
  assert.equal(result.text, "counted to 3 for books");
  assert.deepEqual(result.content, [{ type: "text", text: "counted to 3 for books" }]);
  assert.equal(result.isError, false);
  assert.deepEqual(host.progress, [
    [1, 3, "step 1"],
    [2, 3, "step 2"],
    [3, 3, "step 3"],
  ]);
  assert.equal(host.noteText, "", "cleared when complete");
});

test("structured output, content items and the error flag come back in MCP's shapes", async () => {
  const host = new TestHost(tool);
  const object = await host.call("shapes", { shape: "object" });
  assert.deepEqual(object.structured, { n: 7 });
  assert.equal(object.text, '{"n":7}');
  const content = await host.call("shapes", { shape: "content" });
  assert.equal(content.isError, true);
  assert.deepEqual(content.content, [
    { type: "text", text: "a" },
    { type: "image", data: new Uint8Array([1, 2]), mimeType: "image/png" },
    { type: "resource_link", uri: "file:///a", name: "a", description: undefined, mimeType: undefined },
  ]);
});

test("structured output may be any JSON value its output schema describes", async () => {
  const sizes = defineTool({
    name: "sizes",
    description: "Returns the lengths of its words.",
    inputSchema: { properties: { words: { type: "array", items: { type: "string" } } } },
    outputSchema: { type: "array", items: { type: "integer" } },
    run: ({ words }) => words.map((word) => word.length),
  });
  const host = new TestHost(plugin({ tools: [sizes] }));
  assert.deepEqual(host.tools()[0].outputSchema, { type: "array", items: { type: "integer" } });
  const result = await host.call("sizes", { words: ["a", "bcd"] });
  assert.deepEqual(result.structured, [1, 3]);
  assert.equal(result.text, "[1,3]");
  const greeting = defineTool({
    name: "greeting",
    description: "Greets.",
    outputSchema: { type: "string" },
    run: () => "hi",
  });
  const text = await new TestHost(plugin({ tools: [greeting] })).call("greeting", {});
  assert.equal(text.structured, "hi", "a string with an output schema is structured output");
  assert.equal(text.text, "hi");
  const define = (outputSchema) => defineTool({ name: "s", description: "d", outputSchema, run: () => 1 });
  assert.throws(() => define([]), /outputSchema must be a JSON Schema object/);
  assert.deepEqual(JSON.parse(define({ properties: {} }).info.outputSchema), { type: "object", properties: {} });
});

test("errors reject with the text the client would see", async () => {
  const host = new TestHost(tool);
  await assert.rejects(host.call("shapes", { shape: "tool-error" }), {
    name: "ToolError",
    message: "the index is corrupt",
  });
  await assert.rejects(host.call("shapes", { shape: "square" }), {
    name: "ToolError",
    message: "RangeError: no shape square",
  });
  await assert.rejects(host.call("nothing"), { message: "unknown tool: nothing" });
});

test("a cancel after a progress report stops the call and keeps its note for cleanup", async () => {
  const host = new TestHost(tool, { cancelAfterProgress: 1 });
  await assert.rejects(host.call("steps", { name: "archive", count: 10 }), Cancelled);
  assert.equal(host.progress.length, 1);
  assert.equal(host.noteText, "archive");
  cleanups = [];
  await host.cleanup("steps", { name: "archive" }, { reason: "cancelled" });
  assert.equal(cleanups.length, 1);
  assert.equal(cleanups[0].reason, "cancelled");
  assert.equal(cleanups[0].noteText, "archive");
  assert.deepEqual(cleanups[0].arguments, { name: "archive" });
  assert.deepEqual(host.logs, [["info", "rolled back archive"]]);
});

test("cancel() during a wait is seen at the next check", async () => {
  const host = new TestHost(tool);
  const running = host.call("steps", { name: "slow", count: 1000, step_ms: 1 });
  host.cancel();
  await assert.rejects(running, Cancelled);
  assert.ok(host.progress.length < 1000);
});

test("timeLeft reports the limit, and zero once cancelled", async () => {
  assert.equal((await new TestHost(tool).call("shapes", { shape: "time" })).text, "undefined");
  assert.equal((await new TestHost(tool, { timeLeftMs: 1500 }).call("shapes", { shape: "time" })).text, "1500");
  const cancelled = new TestHost(tool, { cancelled: true, timeLeftMs: 1500 });
  assert.equal((await cancelled.call("shapes", { shape: "time" })).text, "0");
});

test("a cleanup that throws is logged and rejects, as the host reports it failed", async () => {
  const host = new TestHost(tool);
  await assert.rejects(host.cleanup("steps", {}, { reason: "trapped", note: "fragile" }), {
    message: "the disk is gone",
  });
  assert.deepEqual(host.logs.at(-1), ["error", "cleanup after steps failed: Error: the disk is gone"]);
  assert.equal(cleanups.at(-1).trapMessage, "wasm trap");
  await assert.rejects(host.cleanup("steps", {}, { reason: "bored" }), /not one of cancelled/);
  assert.deepEqual(STOP_REASONS, ["cancelled", "idle-timeout", "max-duration", "trapped", "out-of-memory", "shutdown"]);
});

test("tools() lists them as the host does, schemas parsed", () => {
  const [first, second] = new TestHost(tool).tools();
  assert.equal(first.name, "steps");
  assert.deepEqual(first.inputSchema.required, ["name"]);
  assert.equal(first.inputSchema.type, "object", "added when missing");
  assert.equal(first.outputSchema, undefined);
  assert.deepEqual(second.outputSchema, { type: "object", properties: { n: { type: "integer" } } });
  assert.throws(() => new TestHost({}), /new TestHost\(tool\)/);
});

test("outside a test host nothing is cancelled and no limit applies", () => {
  assert.doesNotThrow(checkCancelled);
  assert.equal(timeLeft(), undefined);
});

test("a content item with a field of the wrong type fails the call, naming the item and field", async () => {
  // Unchecked, such a field reaches the component's lowering, which throws outside the
  // SDK's try and traps the instance: the client would see a crash, not this message.
  const items = [
    [{ type: "text", text: 42 }, "(text): text must be a string, not number"],
    [{ type: "image", data: [1, 2], mimeType: "image/png" }, "(image): data must be a Uint8Array, not array"],
    [{ type: "audio", data: new Uint8Array(1) }, "(audio): mimeType must be a string, not undefined"],
    [
      { type: "resource_link", uri: new URL("file:///a"), name: "a" },
      "(resource_link): uri must be a string, not object",
    ],
    [{ type: "resource_link", uri: "file:///a" }, "(resource_link): name must be a string, not undefined"],
    [
      { type: "resource_link", uri: "file:///a", name: "a", description: 7 },
      "(resource_link): description must be a string or undefined, not number",
    ],
    [
      { type: "resource_link", uri: "file:///a", name: "a", mimeType: ["text/plain"] },
      "(resource_link): mimeType must be a string or undefined, not array",
    ],
    [{ type: "resource", uri: 1, text: "b" }, "(resource): uri must be a string, not number"],
    [
      { type: "resource", uri: "file:///b", mimeType: false },
      "(resource): mimeType must be a string or undefined, not boolean",
    ],
    [
      { type: "resource", uri: "file:///b", text: { body: "b" } },
      "(resource): text must be a string or undefined, not object",
    ],
    [
      { type: "resource", uri: "file:///b", blob: "Yg==" },
      "(resource): blob must be a Uint8Array or undefined, not string",
    ],
  ];
  const malformed = defineTool({
    name: "malformed",
    description: "Returns a good item, then the item it is asked for.",
    inputSchema: { properties: { item: { type: "integer" } } },
    run: ({ item }) => new CallResult({ content: [{ type: "text", text: "fine" }, items[item][0]] }),
  });
  const tool = plugin({ tools: [malformed] });
  const host = new TestHost(tool);
  for (const [index, [, problem]] of items.entries()) {
    const message = `content item 1 ${problem}`;
    await assert.rejects(host.call("malformed", { item: index }), { name: "ToolError", message });
    // The export resolves to the call's error: nothing is left to throw in the lowering.
    assert.deepEqual(await tool.call("malformed", JSON.stringify({ item: index })), { tag: "err", val: message });
  }
  const content = (content) => {
    const returns = defineTool({ name: "c", description: "d", run: () => new CallResult({ content }) });
    return new TestHost(plugin({ tools: [returns] }));
  };
  await assert.rejects(content("text").call("c"), {
    message: "a CallResult's content must be an array of content items, not string",
  });
  // Optional fields may be null or left out; a Buffer is a Uint8Array.
  const optional = await content([
    { type: "resource_link", uri: "file:///a", name: "a", description: null },
    { type: "resource", uri: "file:///b", mimeType: null, blob: Buffer.from("b") },
  ]).call("c");
  assert.deepEqual(optional.content, [
    { type: "resource_link", uri: "file:///a", name: "a", description: undefined, mimeType: undefined },
    { type: "resource", uri: "file:///b", mimeType: undefined, text: undefined, blob: Buffer.from("b") },
  ]);
});

test("NaN and Infinity in a result fail the call rather than reach the client as null", async () => {
  const values = [
    [NaN, "the tool returned NaN, which is not JSON (it has no NaN or Infinity)"],
    [{ mean: NaN }, 'the tool returned NaN (at "mean"), which is not JSON (it has no NaN or Infinity)'],
    [[1, -Infinity], 'the tool returned -Infinity (at "1"), which is not JSON (it has no NaN or Infinity)'],
    [
      new CallResult({ structured: { ratio: Infinity } }),
      'the tool returned Infinity (at "ratio"), which is not JSON (it has no NaN or Infinity)',
    ],
    [{ boxed: new Number(NaN) }, 'the tool returned NaN (at "boxed"), which is not JSON (it has no NaN or Infinity)'],
  ];
  const stats = defineTool({
    name: "stats",
    description: "Returns the value it is asked for.",
    inputSchema: { properties: { value: { type: "integer" } } },
    outputSchema: {},
    run: ({ value }) => values[value][0],
  });
  const host = new TestHost(plugin({ tools: [stats] }));
  for (const [index, [, message]] of values.entries()) {
    await assert.rejects(host.call("stats", { value: index }), { name: "ToolError", message });
  }
  // null itself, and "null" in a string, are JSON.
  const nulls = defineTool({
    name: "nulls",
    description: "Returns nulls.",
    outputSchema: {},
    run: () => ({ mean: null, note: "null" }),
  });
  const result = await new TestHost(plugin({ tools: [nulls] })).call("nulls");
  assert.deepEqual(result.structured, { mean: null, note: "null" });
});

test("an integer JavaScript would round fails the call instead of reaching run rounded", async () => {
  const seen = [];
  const ids = defineTool({
    name: "ids",
    description: "Takes ids.",
    inputSchema: { properties: { id: {}, note: { type: "string" } } },
    run(args) {
      seen.push(args);
      return "taken";
    },
  });
  const tool = plugin({ tools: [ids] });
  const refused = (literal) =>
    `invalid arguments: the integer ${literal} is beyond what JavaScript holds exactly ` +
    "(2^53 - 1 in magnitude), and would be rounded; send such numbers as strings";
  // The export itself, given the text a client sent: no JavaScript value stringifies to it.
  const call = (text) => tool.call("ids", text);
  for (const literal of ["9007199254740992", "-9007199254740993", "18446744073709551615"]) {
    assert.deepEqual(await call(`{"id": ${literal}}`), { tag: "err", val: refused(literal) });
    assert.deepEqual(await call(`{"note": "x", "id": [1, {"deep": ${literal}}]}`), { tag: "err", val: refused(literal) });
  }
  const long = "1".repeat(400);
  assert.deepEqual(await call(`{"id": ${long}}`), { tag: "err", val: refused(`${"1".repeat(20)}... (400 characters)`) });
  await assert.rejects(new TestHost(tool).call("ids", { id: 2 ** 60 }), { message: refused("1152921504606847000") });
  assert.deepEqual(seen, [], "run never saw a rounded number");
  // The largest safe integers, numbers with a fraction or an exponent, digits inside strings
  // (escaped quotes included) and keys are all fine.
  const fine = [
    '{"id": 9007199254740991}',
    '{"id": -9007199254740991}',
    '{"id": 12345678901234567890.5}',
    '{"id": 1e300}',
    '{"note": "18446744073709551615"}',
    '{"note": "say \\"18446744073709551615\\" \\\\", "id": 1}',
    '{"18446744073709551615": 1}',
  ];
  const taken = { tag: "ok", val: { content: [{ tag: "text", val: "taken" }], structured: undefined, isError: false } };
  for (const text of fine) {
    assert.deepEqual(await call(text), taken, text);
  }
  assert.equal(seen.length, fine.length);
});

test("integers are found past strings of digits and escapes, and fractions and exponents are not", async () => {
  const ids = defineTool({ name: "ids", description: "Takes ids.", run: () => "taken" });
  const tool = plugin({ tools: [ids] });
  const call = async (text) => (await tool.call("ids", text)).tag;
  // Digits in a string, however many, are text; so are those among more escapes than one
  // match of the scan takes (256).
  const phones = "+44 1234567890123456, ".repeat(100_000);
  const quoted = '\\"18446744073709551615\\" '.repeat(300);
  const fine = [
    `{"note": "${phones}", "id": 9007199254740991}`,
    `{"note": "${quoted}"}`,
    '{"id": 12345678901234567.5}',
    '{"id": 1234567890123456789e2}',
    '{"id": 1.12345678901234567890}',
    '{"id": 1e-12345678901234567}',
    '{"id": -1E+00000000000000000001}',
  ];
  for (const text of fine) {
    assert.equal(await call(text), "ok", text.slice(0, 80));
  }
  // An integer after a string with escaped quotes and backslashes, after one with more
  // escapes than a match takes, and after millions of them (a regex loop over a string's
  // escapes overflows the backtrack stack).
  const refused = [
    '{"note": "say \\"hi\\" \\\\", "id": 18446744073709551615}',
    `{"note": "${quoted}\\\\", "id": -18446744073709551615}`,
    `{"note": "${"\\n".repeat(1 << 22)}", "id": [18446744073709551615]}`,
  ];
  for (const text of refused) {
    assert.equal(await call(text), "err", text.slice(0, 80));
  }
});

test("cleanup gets no arguments JavaScript would round, and no note text that is not UTF-8", async () => {
  const contexts = [];
  const tool = plugin({ tools: [steps], cleanup: (context) => contexts.push(context) });
  const host = new TestHost(tool);
  const notUtf8 = new Uint8Array([0x66, 0xff, 0xfe]);
  await host.cleanup("steps", { id: 2 ** 60 }, { note: notUtf8 });
  assert.equal(contexts[0].arguments, null);
  assert.deepEqual(contexts[0].note, notUtf8);
  assert.equal(contexts[0].noteText, undefined, "not text, rather than text with U+FFFD in it");
  await host.cleanup("steps", { id: 7 }, { note: "é" });
  assert.deepEqual(contexts[1].arguments, { id: 7 });
  assert.equal(contexts[1].noteText, "é");
  host.setCleanupNote(notUtf8);
  assert.equal(host.noteText, undefined);
  host.setCleanupNote(new Uint8Array(0));
  assert.equal(host.noteText, "");
});
