// Node's module resolution hook (registered by `register.js`): the host interface resolves
// to the test host's stand-in, and `cordon-guest` (with `cordon-guest/testing`) to this
// SDK, so that tools and tests share the one copy the hook belongs to, installed or not;
// every other specifier resolves as usual.

const OWN = {
  "cordon:tool/host@0.1.0": new URL("./host.js", import.meta.url).href,
  "cordon-guest": new URL("../index.js", import.meta.url).href,
  "cordon-guest/testing": new URL("./index.js", import.meta.url).href,
};

export async function resolve(specifier, context, nextResolve) {
  const url = OWN[specifier];
  if (url !== undefined) {
    return { url, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
