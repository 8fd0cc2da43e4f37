// cordon-guest/testing: run your tools natively under Node, without Wasm, in a test host
// that records what they ask of Cordon.
//
//   // test/index.test.js, run with `node --import cordon-guest/testing/register --test`
//   import assert from "node:assert/strict";
//   import { test } from "node:test";
//   import { Cancelled } from "cordon-guest";
//   import { TestHost } from "cordon-guest/testing";
//   import { tool } from "../src/index.js";
//
//   test("reindex reports progress", async () => {
//     const host = new TestHost(tool);
//     const result = await host.call("reindex", { collection: "books", step_ms: 0 });
//     assert.equal(result.text, "Reindexed 120 documents in books");
//     assert.deepEqual(host.progress.at(-1), [120, 120, "Indexed 120 of 120 documents"]);
//   });
//
//   test("a cancelled reindex leaves its note for cleanup", async () => {
//     const host = new TestHost(tool, { cancelAfterProgress: 1 });
//     await assert.rejects(host.call("reindex", { collection: "books", step_ms: 0 }), Cancelled);
//     await host.cleanup("reindex", { collection: "books" }, { reason: "cancelled" });
//   });
//
// `--import cordon-guest/testing/register` must come first: the SDK imports the host
// interface, which only a component has, and the hook points it at this test host. The
// test host fills in top-level defaults as the SDK does, but does not check arguments
// against the JSON Schema (the real host does).

import { Cancelled, ToolError } from "../index.js";
import { setCurrent } from "./host.js";

/** The reasons a call can stop, as `cleanup` sees them in `context.reason`. */
export const STOP_REASONS = Object.freeze([
  "cancelled",
  "idle-timeout",
  "max-duration",
  "trapped",
  "out-of-memory",
  "shutdown",
]);

/**
 * A host for native tests.
 *
 * `new TestHost(tool, { cancelled, cancelAfterProgress, timeLeftMs })`: `tool` is what your
 * entry module exports as `tool` (`plugin(...)`); `cancelled` makes `cancelled()` true from
 * the start, `cancelAfterProgress` turns it true after that many progress reports, and
 * `timeLeftMs` is what `timeLeft()` reports (`undefined`: no limit).
 *
 * What the tools asked for is kept in `progress` (`[done, total, message]` each), `logs`
 * (`[level, message]` each) and `note` (the cleanup note as it stands, a `Uint8Array`;
 * `noteText` as text, `undefined` when it is not UTF-8).
 */
export class TestHost {
  constructor(tool, { cancelled = false, cancelAfterProgress = undefined, timeLeftMs = undefined } = {}) {
    if (tool === null || typeof tool !== "object" || typeof tool.call !== "function") {
      throw new TypeError("TestHost takes what your entry module exports as `tool`: new TestHost(tool)");
    }
    this.tool = tool;
    this.isCancelled = cancelled;
    this.cancelAfterProgress = cancelAfterProgress;
    this.timeLeft = timeLeftMs;
    this.progress = [];
    this.logs = [];
    this.note = new Uint8Array(0);
  }

  /** The cleanup note as text ("" when there is none), or `undefined` when it is not UTF-8. */
  get noteText() {
    // Fatal, as the component's `context.noteText`: never a note with U+FFFD in it.
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(this.note);
    } catch {
      return undefined;
    }
  }

  /** Make `cancelled()` true from now on, as a client's cancel would. */
  cancel() {
    this.isCancelled = true;
  }

  /**
   * The tools as the host lists them: name, title, description, schemas (parsed),
   * annotations and requirements.
   */
  tools() {
    return this.tool.list().map((info) => ({
      name: info.name,
      title: info.title,
      description: info.description,
      inputSchema: JSON.parse(info.inputSchema),
      outputSchema: info.outputSchema === undefined ? undefined : JSON.parse(info.outputSchema),
      annotations: info.annotations,
      requires: info.requires,
    }));
  }

  /**
   * Call `name` with `args`, as the host would. Resolves to the result as the client reads
   * it: `{ content, structured, isError, text }` (`content` in MCP's shapes, `text` the
   * text of its text items). Rejects with `ToolError` carrying the text the client would
   * see, or `Cancelled` once the call was cancelled and said so.
   */
  async call(name, args = {}) {
    const result = await this.#asCurrent(() => this.tool.call(name, JSON.stringify(args)));
    if (result.tag === "err") {
      throw result.val === "cancelled" && this.isCancelled ? new Cancelled() : new ToolError(result.val);
    }
    return fromCallResult(result.val);
  }

  /**
   * Run the cleanup handler as the host would after a stopped call of `tool` with `args`;
   * the note is the one the call left (`this.note`) unless given (text or bytes). `reason`
   * is one of `STOP_REASONS`; `trapMessage` goes with "trapped". A handler that throws
   * rejects, as the host would report the cleanup failed.
   */
  async cleanup(tool, args = {}, { reason = "cancelled", trapMessage = "wasm trap", note = undefined, callId = "test" } = {}) {
    if (!STOP_REASONS.includes(reason)) {
      throw new TypeError(`reason ${JSON.stringify(reason)} is not one of ${STOP_REASONS.join(", ")}`);
    }
    const left = note === undefined ? this.note : typeof note === "string" ? new TextEncoder().encode(note) : note;
    const context = {
      callId,
      tool,
      arguments: JSON.stringify(args),
      reason: reason === "trapped" ? { tag: reason, val: trapMessage } : { tag: reason },
      note: left.length === 0 ? undefined : left,
    };
    await this.#asCurrent(() => this.tool.cleanup(context));
  }

  async #asCurrent(run) {
    setCurrent(this);
    try {
      return await run();
    } finally {
      setCurrent(undefined);
    }
  }

  // The host interface, as `host.js` calls it.

  reportProgress(done, total, message) {
    this.progress.push([done, total, message]);
    if (this.cancelAfterProgress !== undefined && this.progress.length >= this.cancelAfterProgress) {
      this.isCancelled = true;
    }
  }

  cancelled() {
    return this.isCancelled;
  }

  timeLeftMs() {
    return this.isCancelled ? 0 : this.timeLeft;
  }

  setCleanupNote(note) {
    this.note = Uint8Array.from(note);
  }

  log(level, message) {
    this.logs.push([level, message]);
  }
}

/** The component's call result as the client reads it. */
function fromCallResult({ content, structured, isError }) {
  const items = content.map(fromContent);
  return {
    content: items,
    structured: structured === undefined ? undefined : JSON.parse(structured),
    isError,
    text: items.filter((item) => item.type === "text").map((item) => item.text).join(""),
  };
}

function fromContent({ tag, val }) {
  switch (tag) {
    case "text":
      return { type: "text", text: val };
    case "image":
    case "audio":
      return { type: tag, data: val.data, mimeType: val.mimeType };
    case "resource-link":
      return { type: "resource_link", ...val };
    case "embedded-resource":
      return { type: "resource", ...val };
    default:
      throw new TypeError(`unknown content item ${tag}`);
  }
}
