// __NAME__: a Cordon tool in JavaScript.
//
// Every call runs in a fresh WebAssembly instance that the host can stop at any moment;
// after a stop, `cleanup` runs in another fresh instance with the note the call left.

import { checkCancelled, clearCleanupNote, defineTool, log, plugin, progress, setCleanupNote, sleep } from "cordon-guest";

const processBatch = defineTool({
  name: "process_batch",
  description: "Processes a batch of items in steps, reporting progress; a stopped run is rolled back.",
  inputSchema: {
    type: "object",
    properties: {
      batch: { type: "string", description: "The name of the batch to process." },
      items: { type: "integer", minimum: 0, default: 10, description: "How many items the batch holds." },
    },
    required: ["batch"],
  },
  async run({ batch, items }) {
    // If the host stops this call, cleanup gets this note and undoes the batch.
    setCleanupNote(batch);
    for (let done = 1; done <= items; done++) {
      checkCancelled(); // throws once the client cancelled or a timeout passed
      await sleep(100); // one item's work; a stop cuts it short, so check again after it
      checkCancelled();
      progress(done, items, `Processed ${done} of ${items} items`);
    }
    clearCleanupNote(); // complete: nothing to undo
    return `Processed ${items} items of ${batch}`;
  },
});

export const tool = plugin({
  tools: [processBatch],
  cleanup(context) {
    if (context.noteText !== undefined) {
      log("warn", `${context.tool} stopped (${context.reason}): rolling back batch ${context.noteText}`);
    }
  },
});
