// The example tools natively, under Node, with the SDK's test host (`cargo xtask test`
// runs this; by hand: `node --import ../../guest-sdk/js/testing/register.js --test`).

import assert from "node:assert/strict";
import { test } from "node:test";

import { Cancelled } from "cordon-guest";
import { TestHost } from "cordon-guest/testing";
import { tool } from "./tools.js";

test("echo returns its text", async () => {
  assert.equal((await new TestHost(tool).call("echo", { text: "héllo" })).text, "héllo");
});

test("reindex counts up in steps of 40 with its default total", async () => {
  const host = new TestHost(tool);
  const result = await host.call("reindex", { collection: "books", step_ms: 0 });
  assert.equal(result.text, "Reindexed 120 documents in books");
  assert.deepEqual(
    host.progress.map(([done]) => done),
    [0, 40, 80, 120],
  );
  assert.deepEqual(host.progress.at(-1), [120, 120, "Indexed 120 of 120 documents"]);
  assert.equal(host.noteText, "", "nothing to roll back");
});

test("a cancelled reindex leaves its collection for cleanup, which rolls it back", async () => {
  const host = new TestHost(tool, { cancelAfterProgress: 2 });
  await assert.rejects(host.call("reindex", { collection: "archive", step_ms: 0 }), Cancelled);
  assert.equal(host.noteText, "archive");
  await host.cleanup("reindex", { collection: "archive" }, { reason: "cancelled" });
  assert.deepEqual(host.logs, [["info", "cleanup after reindex (cancelled): rolled back archive"]]);
});

test("word_count returns structured output", async () => {
  const result = await new TestHost(tool).call("word_count", { text: "three small words" });
  assert.deepEqual(result.structured, { words: 3, characters: 17 });
});

test("fail's exception reaches the client as its error text", async () => {
  await assert.rejects(new TestHost(tool).call("fail", { message: "the index is corrupt" }), {
    message: "Error: the index is corrupt",
  });
});
