// Load this before your tests (`node --import cordon-guest/testing/register --test`): it
// points the SDK's import of the host, `cordon:tool/host@0.1.0` (which only a component
// has), at the test host in `host.js`, so that tools run natively under Node.

import { register } from "node:module";

register("./hooks.js", import.meta.url);
