// cordon-guest: write Cordon tools in JavaScript.
//
// A Cordon tool is a JavaScript function inside a WebAssembly component, built with
// componentize-js (`build.js`). The host runs every call in a fresh instance, can stop it
// at any instruction, and afterwards runs your cleanup handler in another fresh instance.
//
//   import { defineTool, plugin, progress, checkCancelled, sleep } from "cordon-guest";
//
//   const echo = defineTool({
//     name: "echo",
//     description: "Returns the text it is given.",
//     inputSchema: {
//       type: "object",
//       properties: { text: { type: "string", description: "The text to return." } },
//       required: ["text"],
//     },
//     run: ({ text }) => text,
//   });
//
//   export const tool = plugin({ tools: [echo], cleanup(context) { ... } });
//
// The entry module must export the result of `plugin` as `tool`: that is the `tool`
// interface of the `cordon:tool/plugin` world (wit/cordon.wit). See README.md.

import * as host from "cordon:tool/host@0.1.0";

/** Tool names the host accepts: 1-128 characters of `A-Z a-z 0-9 _ - .`. */
const TOOL_NAME = /^[A-Za-z0-9_.-]{1,128}$/;
const LOG_LEVELS = ["trace", "debug", "info", "warn", "error"];
const ANNOTATIONS = { readOnly: "readOnly", destructive: "destructive", idempotent: "idempotent", openWorld: "openWorld" };

/**
 * A failure the model sees: the call ends with an error result (`isError: true`) carrying
 * this message. Any other exception a tool throws is reported the same way, as
 * `Name: message`.
 */
export class ToolError extends Error {
  constructor(message) {
    super(message);
    this.name = "ToolError";
  }
}

/** Thrown by `checkCancelled()` once the call should stop. */
export class Cancelled extends ToolError {
  constructor() {
    super("cancelled");
    this.name = "Cancelled";
  }
}

/**
 * Report progress: `done` out of `total` (if known), with a message for people. `done`
 * must grow between reports (the host drops reports that do not); each report also resets
 * the tool's idle timeout.
 */
export function progress(done, total, message) {
  host.progress(done, total ?? undefined, message ? String(message) : undefined);
}

/**
 * True once the call should stop: the client cancelled it, a timeout passed or the host is
 * shutting down. Once a call has asked, a stop also ends a wait it is parked in (`sleep`)
 * at once: check again after every wait.
 */
export function cancelled() {
  return host.cancelled();
}

/** Throw `Cancelled` once the call should stop; call it between units of work. */
export function checkCancelled() {
  if (host.cancelled()) {
    throw new Cancelled();
  }
}

/** Milliseconds left before the host stops this call, or `undefined` when no limit applies. */
export function timeLeft() {
  const left = host.timeLeft();
  return left === undefined ? undefined : Number(left);
}

/**
 * Leave a note for the cleanup handler, kept by the host outside the instance (a string,
 * stored as UTF-8, or bytes). A new note replaces the previous one; an empty note clears
 * it. A note over the tool's limit (64 KiB by default) stops the call.
 *
 * The host may stop a call between any two instructions, so leave the note *before* the
 * effect it undoes, and let the handler tell whether the effect happened (a resource taken
 * after the note holds a token the note names too), so it never undoes another call's.
 */
export function setCleanupNote(note) {
  host.setCleanupNote(typeof note === "string" ? new TextEncoder().encode(note) : note);
}

/** Clear the cleanup note: nothing is left to undo. */
export function clearCleanupNote() {
  host.setCleanupNote(new Uint8Array(0));
}

/**
 * Write a line to the operator's log, tagged with the tool's name; `level` is one of trace,
 * debug, info, warn, error. The line also reaches the client (a `notifications/message`)
 * when the client asked for that level or a more severe one: keep secrets out of it, or
 * write them with `console.error`, which only the operator's log gets.
 */
export function log(level, message) {
  if (!LOG_LEVELS.includes(level)) {
    throw new TypeError(`log level must be one of ${LOG_LEVELS.join(", ")}, not ${JSON.stringify(level)}`);
  }
  host.log(level, String(message));
}

/**
 * Wait `ms` milliseconds without using the CPU. A stop cuts the wait short once the call
 * has checked for cancellation, so check again after it.
 */
export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A tool's full result, when a string is not enough. `content` items take MCP's shapes:
 * `{ type: "text", text }`, `{ type: "image" | "audio", data: Uint8Array, mimeType }`,
 * `{ type: "resource_link", uri, name, description?, mimeType? }` and
 * `{ type: "resource", uri, mimeType?, text? | blob?: Uint8Array }`. `structured` is a value
 * matching the tool's `outputSchema`; `isError` marks a failure the model should see.
 */
export class CallResult {
  constructor({ content = [], structured = undefined, isError = false } = {}) {
    this.content = content;
    this.structured = structured;
    this.isError = isError;
  }
}

/**
 * Describe one tool.
 *
 * - `name`: 1-128 characters of `A-Z a-z 0-9 _ - .`, unique in the component.
 * - `description`: what it does, for the model.
 * - `inputSchema`: JSON Schema of the arguments; its root is `type: "object"` (added when
 *   missing). The host validates every call's arguments against it before the tool runs;
 *   top-level `default`s are filled in for missing properties. An integer beyond
 *   `Number.MAX_SAFE_INTEGER` (2^53 - 1) in magnitude fails the call rather than reach
 *   `run` rounded: a client sends such numbers (ids, 64-bit counters) as strings.
 * - `run(args)`: the tool, sync or async. It returns a string (text content), a
 *   `CallResult`, or any other JSON value (sent as JSON text, and as structured content when
 *   `outputSchema` is given). What it throws becomes an error result.
 * - Optional: `title`, `outputSchema` (any JSON Schema object: structured output may be
 *   an array, a string...; `type: "object"` is added to a root with `properties` and no
 *   type; 2025-11-25 clients get non-object output as its JSON text only), `annotations`
 *   (`{ readOnly, destructive, idempotent, openWorld }`: hints for clients) and `requires`
 *   (client capabilities such as `"sampling"`).
 */
export function defineTool(spec) {
  if (spec === null || typeof spec !== "object") {
    throw new TypeError("defineTool takes an object: { name, description, inputSchema, run }");
  }
  const { name, title, description, inputSchema = {}, outputSchema, annotations, requires = [], run } = spec;
  const where = `tool ${JSON.stringify(name)}`;
  if (typeof name !== "string" || !TOOL_NAME.test(name)) {
    throw new TypeError(`${where}: a name is 1-128 characters of A-Z a-z 0-9 _ - .`);
  }
  if (typeof description !== "string" || description.length === 0) {
    throw new TypeError(`${where}: give it a description, for the model that will call it`);
  }
  if (typeof run !== "function") {
    throw new TypeError(`${where}: run must be a function (args) => result`);
  }
  const input = objectSchema(inputSchema, `${where}: inputSchema`);
  const output = outputSchema === undefined ? undefined : outputSchemaOf(outputSchema, `${where}: outputSchema`);
  if (!Array.isArray(requires) || !requires.every((capability) => typeof capability === "string")) {
    throw new TypeError(`${where}: requires must be a list of capability names`);
  }
  for (const key of Object.keys(annotations ?? {})) {
    if (!(key in ANNOTATIONS)) {
      throw new TypeError(`${where}: unknown annotation ${key} (known: ${Object.keys(ANNOTATIONS).join(", ")})`);
    }
  }
  return Object.freeze({
    name,
    info: {
      name,
      title: title ?? undefined,
      description,
      inputSchema: JSON.stringify(input),
      outputSchema: output === undefined ? undefined : JSON.stringify(output),
      annotations: annotations === undefined ? undefined : { ...annotations },
      requires: [...requires],
    },
    defaults: defaultsOf(input),
    hasOutputSchema: output !== undefined,
    run,
  });
}

/**
 * The component's `tool` export: its tools and what to do after a stopped call. Export it
 * from the entry module as `tool`: `export const tool = plugin({ tools, cleanup })`.
 *
 * `cleanup(context)` runs exactly once, in a fresh instance with a short time budget, after
 * a call the host stopped (cancel, timeout, shutdown, trap) and not after one that returned.
 * `context` is `{ callId, tool, arguments, reason, trapMessage, note, noteText }`:
 * `arguments` parsed (null when they are not JSON or hold an integer JSON.parse would
 * round); `reason` one of "cancelled", "idle-timeout", "max-duration", "trapped",
 * "out-of-memory", "shutdown"; `note` the bytes left with `setCleanupNote` (`noteText` as
 * text, undefined when they are not UTF-8), if any.
 */
export function plugin({ tools, cleanup = () => {} } = {}) {
  if (!Array.isArray(tools) || tools.length === 0) {
    throw new TypeError("plugin needs { tools: [defineTool(...), ...] }");
  }
  const byName = new Map();
  for (const entry of tools) {
    if (entry === null || typeof entry !== "object" || !("info" in entry)) {
      throw new TypeError("plugin's tools must each come from defineTool(...)");
    }
    if (byName.has(entry.name)) {
      throw new TypeError(`two tools are named ${JSON.stringify(entry.name)}`);
    }
    byName.set(entry.name, entry);
  }
  if (typeof cleanup !== "function") {
    throw new TypeError("plugin's cleanup must be a function (context) => void");
  }
  return {
    list() {
      return tools.map((entry) => entry.info);
    },

    async call(name, argumentsText) {
      const entry = byName.get(name);
      if (entry === undefined) {
        return failure(`unknown tool: ${name}`);
      }
      let args;
      try {
        args = JSON.parse(argumentsText);
      } catch (error) {
        return failure(`invalid arguments: ${error.message}`);
      }
      const unsafe = unsafeInteger(argumentsText);
      if (unsafe !== undefined) {
        return failure(
          `invalid arguments: the integer ${shortened(unsafe)} is beyond what JavaScript holds exactly ` +
            "(2^53 - 1 in magnitude), and would be rounded; send such numbers as strings",
        );
      }
      if (args !== null && typeof args === "object" && !Array.isArray(args)) {
        for (const [key, value] of entry.defaults) {
          if (args[key] === undefined) {
            args[key] = JSON.parse(value);
          }
        }
      }
      try {
        const value = await entry.run(args);
        return { tag: "ok", val: toCallResult(value, entry.hasOutputSchema) };
      } catch (error) {
        return failure(messageOf(error));
      }
    },

    async cleanup(context) {
      const reason = context.reason.tag;
      const handler = async () => cleanup({
        callId: context.callId,
        tool: context.tool,
        arguments: parseOrNull(context.arguments),
        reason,
        trapMessage: reason === "trapped" ? context.reason.val : undefined,
        note: context.note,
        noteText: context.note === undefined ? undefined : utf8OrUndefined(context.note),
      });
      try {
        await handler();
      } catch (error) {
        // The operator's log says why; rethrown, the host reports the cleanup as failed.
        host.log("error", `cleanup after ${context.tool} failed: ${messageOf(error)}`);
        throw error;
      }
    },
  };
}

function failure(message) {
  return { tag: "err", val: message };
}

/**
 * What the client reads for an exception: a ToolError's message, any other Error as
 * `Name: message`, anything else thrown as its text (the engine throws "out of memory" as
 * a string when the tool's memory limit is reached).
 */
function messageOf(error) {
  if (error instanceof ToolError) {
    return error.message;
  }
  if (error instanceof Error) {
    return `${error.name}: ${error.message}`;
  }
  return String(error);
}

/** Parsed JSON, or null when it is not JSON or holds an integer JSON.parse would round. */
function parseOrNull(text) {
  try {
    const value = JSON.parse(text);
    return unsafeInteger(text) === undefined ? value : null;
  } catch {
    return null;
  }
}

/** `bytes` as UTF-8 text, or `undefined` when they are not UTF-8 (as the Rust SDK does). */
function utf8OrUndefined(bytes) {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
}

/**
 * The first integer literal in `text` (JSON that parsed) beyond Number.MAX_SAFE_INTEGER in
 * magnitude, which JSON.parse silently rounds; undefined when there is none. One native
 * regex pass, skipping the contents of strings (`"12345678901234567890"` is a string): a
 * loop over the characters is slow in StarlingMonkey, which has no JIT.
 */
function unsafeInteger(text) {
  // The largest safe integer has 16 digits: without a run of 16 digits there is nothing to
  // find, and most arguments end here, at the cost of one native search.
  if (!/\d{16}/.test(text)) {
    return undefined;
  }
  // Each match is a string, or up to 256 escapes of one: a regex loop keeps a backtrack
  // entry per iteration, and one over all of a string's escapes overflows the backtrack
  // stack on a few million. A match that stops inside a string stops before a backslash,
  // which only strings hold, so the next resumes it. Otherwise, a run of 16+ digits that is
  // all of a literal: not the fraction or exponent of another (lookbehind), nor followed by
  // one (lookahead; its digit also stops a shorter match).
  const pattern = /(?:"|\\.)[^"\\]*(?:\\.[^"\\]*){0,255}"?|(?<![\d.eE+-])(-?\d{16,})(?![\d.eE])/g;
  let match;
  // exec rather than matchAll: no iterator to step through for every string.
  while ((match = pattern.exec(text)) !== null) {
    const literal = match[1];
    if (literal !== undefined && !Number.isSafeInteger(Number(literal))) {
      return literal;
    }
  }
  return undefined;
}

/** A literal short enough for a message. */
function shortened(literal) {
  return literal.length <= 40 ? literal : `${literal.slice(0, 20)}... (${literal.length} characters)`;
}

function objectSchema(schema, where) {
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) {
    throw new TypeError(`${where} must be a JSON Schema object`);
  }
  if (schema.type === undefined) {
    return { type: "object", ...schema };
  }
  if (schema.type !== "object") {
    throw new TypeError(`${where}: its root must be "type": "object", not ${JSON.stringify(schema.type)}`);
  }
  return schema;
}

function outputSchemaOf(schema, where) {
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) {
    throw new TypeError(`${where} must be a JSON Schema object`);
  }
  if (schema.type === undefined && schema.properties !== undefined) {
    return { type: "object", ...schema };
  }
  return schema;
}

/** Top-level defaults, as JSON text so that each call gets its own copy. */
function defaultsOf(schema) {
  const defaults = [];
  for (const [key, property] of Object.entries(schema.properties ?? {})) {
    if (property !== null && typeof property === "object" && "default" in property) {
      defaults.push([key, JSON.stringify(property.default)]);
    }
  }
  return defaults;
}

function toCallResult(value, hasOutputSchema) {
  if (typeof value === "string") {
    // With an output schema, a string is structured output too (its schema may be a string's).
    const structured = hasOutputSchema ? JSON.stringify(value) : undefined;
    return { content: [{ tag: "text", val: value }], structured, isError: false };
  }
  if (value instanceof CallResult) {
    if (!Array.isArray(value.content)) {
      throw new ToolError(`a CallResult's content must be an array of content items, not ${kindOf(value.content)}`);
    }
    return {
      content: value.content.map(toContent),
      structured: value.structured === undefined ? undefined : json(value.structured),
      isError: Boolean(value.isError),
    };
  }
  if (value === undefined) {
    return { content: [], structured: undefined, isError: false };
  }
  const text = json(value);
  if (text === undefined) {
    throw new ToolError(`the tool returned a ${typeof value}, which is not JSON`);
  }
  return { content: [{ tag: "text", val: text }], structured: hasOutputSchema ? text : undefined, isError: false };
}

/**
 * `value` as JSON text; ToolError when it holds NaN or Infinity, which JSON.stringify would
 * silently write as null.
 */
function json(value) {
  const text = JSON.stringify(value);
  // Both come out as a null value: text without one needs no second pass, whose replacer
  // is called for every value (slow without a JIT). JSON.stringify writes no whitespace, so
  // a null value starts the text or follows `:`, `,` or `[` (a string holding ",null" only
  // costs the second pass).
  if (text !== undefined && /(?:^|[:,[])null/.test(text)) {
    JSON.stringify(value, refuseNonFinite);
  }
  return text;
}

function refuseNonFinite(key, value) {
  const number = value instanceof Number ? value.valueOf() : value;
  if (typeof number === "number" && !Number.isFinite(number)) {
    const where = key === "" ? "" : ` (at ${JSON.stringify(key)})`;
    throw new ToolError(`the tool returned ${number}${where}, which is not JSON (it has no NaN or Infinity)`);
  }
  return value;
}

/**
 * The WIT's content variant for one item, its fields checked: one the component's lowering
 * cannot take would throw outside the call's try and trap the instance, not fail the call.
 */
function toContent(item, index) {
  const type = item?.type;
  const field = (name, kind, optional = false) => {
    const value = item[name];
    if (optional && (value === undefined || value === null)) {
      return undefined;
    }
    if (kind === "bytes" ? value instanceof Uint8Array : typeof value === kind) {
      return value;
    }
    const wanted = `${kind === "bytes" ? "a Uint8Array" : `a ${kind}`}${optional ? " or undefined" : ""}`;
    throw new ToolError(`content item ${index} (${type}): ${name} must be ${wanted}, not ${kindOf(value)}`);
  };
  switch (type) {
    case "text":
      return { tag: "text", val: field("text", "string") };
    case "image":
    case "audio":
      return { tag: type, val: { data: field("data", "bytes"), mimeType: field("mimeType", "string") } };
    case "resource_link":
      return {
        tag: "resource-link",
        val: {
          uri: field("uri", "string"),
          name: field("name", "string"),
          description: field("description", "string", true),
          mimeType: field("mimeType", "string", true),
        },
      };
    case "resource":
      return {
        tag: "embedded-resource",
        val: {
          uri: field("uri", "string"),
          mimeType: field("mimeType", "string", true),
          text: field("text", "string", true),
          blob: field("blob", "bytes", true),
        },
      };
    default:
      throw new ToolError(
        `a content item's type must be text, image, audio, resource_link or resource, not ${JSON.stringify(type)}`,
      );
  }
}

/** What a value is, for a message: `null`, `array` or its typeof. */
function kindOf(value) {
  return value === null ? "null" : Array.isArray(value) ? "array" : typeof value;
}
