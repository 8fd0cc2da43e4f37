// The stand-in for the host interface `cordon:tool/host@0.1.0` in native tests: each
// function goes to the current `TestHost` (`index.js`). Outside one, progress and logs are
// printed to stderr, the call is never cancelled and has no time limit, and the note is
// dropped.

const OUTSIDE = {
  reportProgress(done, total, message) {
    process.stderr.write(`progress ${done}${total === undefined ? "" : `/${total}`}${message ? `: ${message}` : ""}\n`);
  },
  cancelled: () => false,
  timeLeftMs: () => undefined,
  setCleanupNote() {},
  log(level, message) {
    process.stderr.write(`${level.toUpperCase()} ${message}\n`);
  },
};

let current = OUTSIDE;

/** Make `host` (a TestHost, or `undefined` for none) the one the SDK talks to. */
export function setCurrent(host) {
  current = host ?? OUTSIDE;
}

export function progress(done, total, message) {
  current.reportProgress(done, total, message);
}

export function cancelled() {
  return current.cancelled();
}

// The WIT's option<u64>: a BigInt, as in the component.
export function timeLeft() {
  const left = current.timeLeftMs();
  return left === undefined ? undefined : BigInt(Math.max(0, Math.floor(left)));
}

export function setCleanupNote(note) {
  current.setCleanupNote(note);
}

export function log(level, message) {
  current.log(level, message);
}
