// Cordon's example tools in JavaScript, one component with five tools (built by
// `cargo xtask guests` into target/guests/example-js.wasm; see guest-sdk/js/README.md):
//
// - `echo(text)` returns the text.
// - `reindex(collection, total = 120, step_ms = 100)` indexes in steps of 40, reporting
//   progress and checking for cancellation around each wait. While it runs it leaves the
//   collection's name as its cleanup note, so a stopped reindex is rolled back by `cleanup`.
// - `spin(seconds)` burns CPU and never checks for cancellation: only a hard stop ends it.
// - `word_count(text)` returns structured output (`{ words, characters }`) with its schema.
// - `fail(message)` throws an Error: the client sees `Error: <message>` as an error result.
//
// JavaScript in StarlingMonkey has no file system, so where the Rust example keeps lock
// files, this one keeps only the note: `cleanup` logs what it rolls back.

import {
  checkCancelled,
  clearCleanupNote,
  defineTool,
  log,
  plugin,
  progress,
  setCleanupNote,
  sleep,
} from "cordon-guest";

const echo = defineTool({
  name: "echo",
  description: "Returns the text it is given.",
  inputSchema: {
    type: "object",
    properties: { text: { type: "string", description: "The text to return." } },
    required: ["text"],
  },
  annotations: { readOnly: true, idempotent: true },
  run: ({ text }) => text,
});

const REINDEX_STEP = 40;

const reindex = defineTool({
  name: "reindex",
  description:
    "Reindexes a collection in steps of 40 documents, reporting progress; a stopped reindex is rolled back.",
  inputSchema: {
    type: "object",
    properties: {
      collection: { type: "string", description: "The collection to reindex." },
      total: { type: "integer", minimum: 0, default: 120, description: "How many documents to index." },
      step_ms: {
        type: "integer",
        minimum: 0,
        default: 100,
        description: "How long each step of 40 documents takes, in milliseconds.",
      },
    },
    required: ["collection"],
  },
  async run({ collection, total, step_ms }) {
    // If this call is stopped, cleanup learns what to roll back from the note.
    setCleanupNote(collection);
    let done = 0;
    progress(done, total, `Indexing ${total} documents`);
    while (done < total) {
      checkCancelled();
      await sleep(step_ms);
      // A stop ends the sleep early (this tool checks, so the host wakes it): then the
      // step was not done.
      checkCancelled();
      done = Math.min(done + REINDEX_STEP, total);
      progress(done, total, `Indexed ${done} of ${total} documents`);
    }
    clearCleanupNote(); // complete: nothing to roll back
    return `Reindexed ${total} documents in ${collection}`;
  },
});

const spin = defineTool({
  name: "spin",
  description: "Burns CPU for the given number of seconds without ever checking for cancellation.",
  inputSchema: {
    type: "object",
    properties: { seconds: { type: "number", minimum: 0, description: "How long to burn CPU, in seconds." } },
    required: ["seconds"],
  },
  run({ seconds }) {
    setCleanupNote("spin");
    progress(0, undefined, "spinning");
    const start = Date.now();
    let state = 0x9e3779b9;
    let rounds = 0;
    while (Date.now() - start < seconds * 1000) {
      for (let i = 0; i < 1000; i++) {
        state ^= state << 13;
        state ^= state >>> 17;
        state ^= state << 5;
      }
      rounds++;
    }
    clearCleanupNote();
    return `Spun for ${((Date.now() - start) / 1000).toFixed(3)} s (${rounds} rounds, state ${(state >>> 0).toString(16)})`;
  },
});

const wordCount = defineTool({
  name: "word_count",
  description: "Counts the words and characters of a text.",
  inputSchema: {
    type: "object",
    properties: { text: { type: "string", description: "The text to count." } },
    required: ["text"],
  },
  outputSchema: {
    type: "object",
    properties: { words: { type: "integer" }, characters: { type: "integer" } },
    required: ["words", "characters"],
  },
  annotations: { readOnly: true },
  run: ({ text }) => ({ words: text.split(/\s+/).filter(Boolean).length, characters: [...text].length }),
});

const fail = defineTool({
  name: "fail",
  description: "Throws an Error with the given message, to show how an exception reaches the client.",
  inputSchema: {
    type: "object",
    properties: { message: { type: "string", description: "The exception's message." } },
    required: ["message"],
  },
  run({ message }) {
    throw new Error(message);
  },
});

export const tool = plugin({
  tools: [echo, reindex, spin, wordCount, fail],
  cleanup(context) {
    if (context.noteText !== undefined) {
      log("info", `cleanup after ${context.tool} (${context.reason}): rolled back ${context.noteText}`);
    }
  },
});
