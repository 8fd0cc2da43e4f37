// Your tools natively, under Node, with the SDK's test host: `npm test`. Each call records
// the progress, logs and cleanup note your code gives the host.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Cancelled } from "cordon-guest";
import { TestHost } from "cordon-guest/testing";
import { tool } from "../src/index.js";

test("process_batch reports progress for each item", async () => {
  const host = new TestHost(tool);
  const result = await host.call("process_batch", { batch: "first", items: 2 });
  assert.equal(result.text, "Processed 2 items of first");
  assert.deepEqual(host.progress, [
    [1, 2, "Processed 1 of 2 items"],
    [2, 2, "Processed 2 of 2 items"],
  ]);
  assert.equal(host.noteText, "", "a complete run leaves nothing to undo");
});

test("a cancelled run leaves its batch for cleanup, which rolls it back", async () => {
  const host = new TestHost(tool, { cancelAfterProgress: 1 });
  await assert.rejects(host.call("process_batch", { batch: "second", items: 5 }), Cancelled);
  assert.equal(host.noteText, "second");
  await host.cleanup("process_batch", { batch: "second" }, { reason: "cancelled" });
  assert.deepEqual(host.logs, [["warn", "process_batch stopped (cancelled): rolling back batch second"]]);
});
