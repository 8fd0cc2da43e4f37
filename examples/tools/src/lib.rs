//! Cordon's example tools, one component with seven tools, a resource and a prompt:
//!
//! - `echo(text)` returns the text.
//! - `reindex(collection, total = 120, step_ms = 100)` indexes in steps of 40, reporting
//!   progress and checking for cancellation between steps, while it holds a lock on the
//!   collection.
//! - `locks()` lists the locks currently held, so a client can see that cleanup ran.
//! - `spin(seconds)` burns CPU and never checks for cancellation: only a hard stop ends it.
//! - `order_book(title)` holds a title, waits 30 s for "payment", then orders it.
//! - `fetch(url, max_bytes = 65536)` GETs a URL and returns `"<status> <body text>"`, the body
//!   cut to `max_bytes`. Only origins the operator grants (`allow_http`) are reachable; the
//!   default config grants none, so there every fetch is a tool error saying `denied`.
//! - `delete_collection(collection)` asks the user "Delete <collection>?" (an elicitation
//!   with a boolean `confirm`) and deletes it only on an accept that confirms; a decline, a
//!   cancel or an unticked box answers "not deleted". A collection being reindexed (locked)
//!   is not deleted.
//! - the resource `examples://guide` (Markdown) says what the tools do;
//! - the prompt `reindex_collection(collection)` asks the model to reindex a collection and
//!   check that its lock is gone; its argument completes from the usual collections.
//!
//! Locks are files in the tool's data directory (`/data`, preopened by the host), so they
//! outlive the instance. A call releases its lock when it returns; after a stop, `cleanup`
//! releases the lock named in the call's cleanup note.

use std::fs;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cordon_guest::input::{Ask, Elicited, Reply, Round};
use cordon_guest::{
    CleanupContext, Json, Plugin, Prompt, PromptMessage, Resource, ResourceBody, Tool, ToolError, http,
};
use schemars::JsonSchema;
use serde::Deserialize;

/// Where locks live: `/data/locks` (natively, in tests, under the test's data directory).
fn lock_dir() -> PathBuf {
    cordon_guest::data_dir().join("locks")
}

/// A lock file in the data directory, removed when the guard drops (a call that returns) or
/// by `cleanup` (a call that was stopped).
///
/// The host may stop a call between any two instructions, so taking a lock must leave
/// `cleanup` what it needs at every point, and never let it release another call's lock:
/// the note (`"<token> <name>"`) is left before the lock exists, and the lock file appears
/// at once with this call's token inside (a hard link to a file written beforehand), so
/// `cleanup` removes it only if it holds the token.
struct Lock {
    path: PathBuf,
}

impl Lock {
    fn acquire(name: &str) -> Result<Self, ToolError> {
        // Without a data directory the error says which config key grants one.
        fs::create_dir_all(lock_dir())?;
        let token = unique_token();
        cordon_guest::set_cleanup_note(format!("{token} {name}").as_bytes());
        stop_point()?;
        let staged = staged_path(&token);
        fs::write(&staged, &token)?;
        stop_point()?;
        let path = lock_path(name);
        let taken = fs::hard_link(&staged, &path);
        stop_point()?;
        let _ = fs::remove_file(&staged);
        if let Err(error) = taken {
            cordon_guest::clear_cleanup_note();
            return Err(match error.kind() {
                ErrorKind::AlreadyExists => ToolError::new(format!("{name} is locked by another call")),
                _ => error.into(),
            });
        }
        Ok(Self { path })
    }

    /// After a stop: remove what the stopped call's `acquire` left, given its note; the name
    /// of the lock it released, if the call held one.
    fn release_stopped(note: &str) -> Option<&str> {
        let (token, name) = note.split_once(' ')?;
        let _ = fs::remove_file(staged_path(token));
        let path = lock_path(name);
        // Another call's lock (this call was stopped before taking it) holds another token.
        let held = fs::read(&path).is_ok_and(|held| held == token.as_bytes());
        (held && fs::remove_file(&path).is_ok()).then_some(name)
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        cordon_guest::clear_cleanup_note();
    }
}

/// A token no other call draws: 64 bits from the host's random source (std seeds
/// `RandomState` from it).
fn unique_token() -> String {
    use std::hash::{BuildHasher, RandomState};
    format!("{:016x}", RandomState::new().hash_one(0u8))
}

/// Where `acquire` writes a lock's contents before linking it into place. Its name never
/// parses as a lock (`lock_name`), so `locks` does not list it.
fn staged_path(token: &str) -> PathBuf {
    lock_dir().join(format!("{token}.staged"))
}

/// A place where the host may stop the call. Tests stop there, one place after another, to
/// check that `cleanup` undoes each; in a build for the host it does nothing.
#[cfg(not(test))]
fn stop_point() -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
thread_local! {
    /// The stop points still to pass before the test's simulated stop; `None`: no stop.
    static STOP_AFTER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
fn stop_point() -> std::io::Result<()> {
    STOP_AFTER.with(|left| match left.get() {
        Some(0) => Err(std::io::Error::other("stopped here by the test")),
        Some(n) => {
            left.set(Some(n - 1));
            Ok(())
        }
        None => Ok(()),
    })
}

/// The file holding lock `name`: every byte outside `[A-Za-z0-9_-]` is hex-escaped as `.xx`,
/// so any collection name maps to one safe file name, and back (`lock_name`).
fn lock_path(name: &str) -> PathBuf {
    let mut file = String::new();
    for byte in name.bytes() {
        if is_plain(byte) {
            file.push(byte as char);
        } else {
            file.push_str(&format!(".{byte:02x}"));
        }
    }
    lock_dir().join(format!("{file}{LOCK_SUFFIX}"))
}

const LOCK_SUFFIX: &str = ".lock";

fn is_plain(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

/// The lock a file name in `lock_dir()` stands for; `None` for a name `lock_path` never makes.
/// Reading names rather than contents keeps `locks` exact while other calls take and release
/// locks: a file removed or not yet written between the listing and a read is no error.
fn lock_name(file_name: &str) -> Option<String> {
    let mut escaped = file_name.strip_suffix(LOCK_SUFFIX)?.bytes();
    let mut name = Vec::new();
    while let Some(byte) = escaped.next() {
        if byte == b'.' {
            let hex = [escaped.next()?, escaped.next()?];
            name.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else if is_plain(byte) {
            name.push(byte);
        } else {
            return None;
        }
    }
    String::from_utf8(name).ok()
}

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// The text to return.
    text: String,
}

fn echo(args: EchoArgs) -> Result<String, ToolError> {
    Ok(args.text)
}

#[derive(Deserialize, JsonSchema)]
struct ReindexArgs {
    /// The collection to reindex; it is locked while the call runs.
    collection: String,
    /// How many documents to index.
    #[serde(default = "default_total")]
    #[schemars(range(min = 0))]
    total: u64,
    /// How long each step of 40 documents takes, in milliseconds.
    #[serde(default = "default_step_ms")]
    #[schemars(range(min = 0))]
    step_ms: u64,
}

fn default_total() -> u64 {
    120
}

fn default_step_ms() -> u64 {
    100
}

const REINDEX_STEP: u64 = 40;

fn reindex(args: ReindexArgs) -> Result<String, ToolError> {
    let _lock = Lock::acquire(&args.collection)?;
    let mut done = 0;
    while done < args.total {
        cordon_guest::check_cancelled()?;
        // A WASI clock sleep: a host call the host can stop the guest inside.
        std::thread::sleep(Duration::from_millis(args.step_ms));
        // A stop ends the sleep early (this tool checks, so the host wakes it): then the
        // step was not done.
        cordon_guest::check_cancelled()?;
        done = (done + REINDEX_STEP).min(args.total);
        let message = format!("Indexed {done} of {} documents", args.total);
        cordon_guest::progress(done as f64, Some(args.total as f64), &message);
    }
    Ok(format!("Reindexed {} documents in {}", args.total, args.collection))
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

#[derive(Deserialize, JsonSchema)]
struct DeleteArgs {
    /// The collection to delete.
    collection: String,
}

/// Asks first; deletes only on an accepted, ticked confirmation.
fn delete_collection(args: DeleteArgs, round: &Round) -> Result<Reply<String>, ToolError> {
    let confirmed = match round.elicited("confirm") {
        Some(Elicited::Accepted(form)) => form.get("confirm") == Some(&serde_json::Value::Bool(true)),
        Some(Elicited::Declined | Elicited::Cancelled) => false,
        None if !round.can_elicit() => {
            return Err(ToolError::new(
                "deleting a collection needs the user's confirmation, and this client cannot ask for it",
            ));
        }
        None => {
            let schema = serde_json::json!({
                "type": "object",
                "properties": {"confirm": {"type": "boolean", "description": "Delete it for good."}},
                "required": ["confirm"],
            });
            return Ok(Ask::new().elicit("confirm", &format!("Delete {}?", args.collection), schema).into());
        }
    };
    if !confirmed {
        return Ok(Reply::Done(format!("{} not deleted", args.collection)));
    }
    // A collection being reindexed holds its lock: it is not deleted under the reindex.
    let _lock = Lock::acquire(&args.collection)?;
    Ok(Reply::Done(format!("Deleted {}", args.collection)))
}

/// Structured output of any JSON type: the array itself (and as text, for clients that read
/// only content).
fn locks(_: NoArgs) -> Result<Json<Vec<String>>, ToolError> {
    let mut held = Vec::new();
    match fs::read_dir(lock_dir()) {
        Ok(entries) => {
            for entry in entries {
                if let Some(name) = entry?.file_name().to_str().and_then(lock_name) {
                    held.push(name);
                }
            }
        }
        Err(error) if error.kind() == ErrorKind::NotFound => {}
        Err(error) => return Err(error.into()),
    }
    held.sort();
    Ok(Json(held))
}

#[derive(Deserialize, JsonSchema)]
struct SpinArgs {
    /// How long to burn CPU, in seconds.
    #[schemars(range(min = 0))]
    seconds: f64,
}

/// Iterations between two clock reads: about a millisecond of work, far below the 100 ms
/// the contract allows between reads.
const SPIN_BATCH: u32 = 1 << 16;

fn spin(args: SpinArgs) -> Result<String, ToolError> {
    let limit = Duration::try_from_secs_f64(args.seconds)
        .map_err(|_| ToolError::new(format!("{} seconds is too long a spin", args.seconds)))?;
    let _lock = Lock::acquire("spin")?;
    let start = Instant::now();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rounds: u64 = 0;
    while start.elapsed() < limit {
        for _ in 0..SPIN_BATCH {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
        }
        rounds = std::hint::black_box(rounds + 1);
    }
    Ok(format!("Spun for {:.3} s ({rounds} rounds, state {state:x})", start.elapsed().as_secs_f64()))
}

#[derive(Deserialize, JsonSchema)]
struct OrderArgs {
    /// The book to order.
    title: String,
}

const PAYMENT_WAIT: Duration = Duration::from_secs(30);

fn order_book(args: OrderArgs) -> Result<String, ToolError> {
    let _hold = Lock::acquire(&format!("hold:{}", args.title))?;
    // Waiting for "payment": a long host-call sleep, stoppable only by the host.
    std::thread::sleep(PAYMENT_WAIT);
    Ok(format!("Ordered {}", args.title))
}

#[derive(Deserialize, JsonSchema)]
struct FetchArgs {
    /// The http:// or https:// URL to GET. Its origin must be granted to this component.
    url: String,
    /// At most this many bytes of the body are returned; the rest is not read.
    #[serde(default = "default_max_bytes")]
    #[schemars(range(min = 0))]
    max_bytes: u64,
}

fn default_max_bytes() -> u64 {
    65536
}

fn fetch(args: FetchArgs) -> Result<String, ToolError> {
    let cap = usize::try_from(args.max_bytes).unwrap_or(usize::MAX);
    // A refused origin, a failed connection or a cancel while waiting is an `Err`: a tool
    // error whose text says why (`denied`, `cancelled`, ...).
    let response = http::Request::get(&args.url).max_body_bytes(cap).send()?;
    Ok(format!("{} {}", response.status(), response.text()))
}

/// The collections the prompt's argument completes from.
const COLLECTIONS: [&str; 3] = ["books", "films", "music"];

/// The `examples://guide` resource.
const GUIDE: &str = "# The example tools\n\n\
- `echo(text)` returns the text.\n\
- `reindex(collection)` indexes in steps, reporting progress, holding a lock on the collection.\n\
- `locks()` lists the locks held.\n\
- `spin(seconds)` burns CPU without checking for cancellation: only a hard stop ends it.\n\
- `order_book(title)` holds a title, waits for payment, then orders it.\n\
- `fetch(url)` GETs a URL the operator granted.\n\n\
A stopped call's lock is released by the component's cleanup, in a fresh instance.\n";

struct ExampleTools;

impl Plugin for ExampleTools {
    fn tools() -> Vec<Tool> {
        vec![
            Tool::new("echo", "Returns the text it is given.", echo).read_only().idempotent(),
            Tool::new(
                "reindex",
                "Reindexes a collection in steps of 40 documents, reporting progress; holds a lock on the collection while it runs.",
                reindex,
            ),
            Tool::new("locks", "Lists the locks currently held, as a JSON array of names.", locks)
                .read_only(),
            Tool::new(
                "spin",
                "Burns CPU for the given number of seconds without ever checking for cancellation; holds the lock `spin`.",
                spin,
            ),
            Tool::new(
                "order_book",
                "Places a hold on a book, waits 30 s for payment, then orders it; a stopped order releases its hold.",
                order_book,
            ),
            Tool::new(
                "fetch",
                "GETs a URL and returns \"<status> <body text>\", the body cut to max_bytes. Only origins the operator grants are reachable; others fail with \"denied\".",
                fetch,
            )
            .read_only()
            .open_world(),
            Tool::asking(
                "delete_collection",
                "Deletes a collection once the user confirms it (the client asks them).",
                delete_collection,
            )
            .destructive(),
        ]
    }

    fn resources() -> Vec<Resource> {
        vec![
            Resource::new("examples://guide", "guide", || Ok(ResourceBody::text(GUIDE)))
                .title("The example tools")
                .description("What each example tool does, and how a stopped call is cleaned up.")
                .mime_type("text/markdown"),
        ]
    }

    fn prompts() -> Vec<Prompt> {
        vec![
            Prompt::new("reindex_collection", "Reindex a collection, then check that its lock is released.", |arguments| {
                let collection = arguments.required("collection")?;
                Ok(vec![PromptMessage::user_text(format!(
                    "Reindex the collection {collection:?} with the `reindex` tool, then call `locks` and confirm \
                     that no lock on {collection:?} is left."
                ))])
            })
            .title("Reindex a collection")
            .argument("collection", "The collection to reindex.", true)
            .complete("collection", |typed, _| {
                COLLECTIONS.iter().filter(|name| name.starts_with(typed)).map(|name| name.to_string()).collect()
            }),
        ]
    }

    fn cleanup(context: CleanupContext) {
        if let Some(name) = context.note_text().and_then(Lock::release_stopped) {
            let message = format!("cleanup after {} ({:?}): released {name}", context.tool, context.reason);
            cordon_guest::log(cordon_guest::LogLevel::Info, &message);
        }
    }
}

cordon_guest::export_plugin!(ExampleTools);

/// The tools' logic and SDK calls, natively, with cordon-guest's test host.
#[cfg(test)]
mod tests {
    use cordon_guest::StopReason;
    use cordon_guest::testing::{TestHost, check_tools};
    use serde_json::json;

    use super::*;

    /// A test's data directory, removed when the test ends.
    struct DataDir(PathBuf);

    impl std::ops::Deref for DataDir {
        type Target = PathBuf;
        fn deref(&self) -> &PathBuf {
            &self.0
        }
    }

    impl Drop for DataDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn data_dir(test: &str) -> DataDir {
        let dir = std::env::temp_dir().join(format!("example-tools-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        DataDir(dir)
    }

    #[test]
    fn the_tool_list_passes_the_host_s_rules() {
        check_tools::<ExampleTools>().unwrap();
    }

    #[test]
    fn delete_collection_asks_and_acts_only_on_an_accept() {
        let dir = data_dir("delete");
        let host = TestHost::new().data_dir(&*dir);
        let arguments = json!({"collection": "books"});
        let round = Round::new().with_elicitation();
        let ask = host.call_round::<ExampleTools>("delete_collection", arguments.clone(), &round).unwrap();
        let ask = ask.asked().expect("the first round asks");
        assert_eq!(ask.methods().collect::<Vec<_>>(), [("confirm", "elicitation/create")]);
        let answer = |response| {
            let retry = round.after(&ask).with_response("confirm", response);
            host.call_round::<ExampleTools>("delete_collection", arguments.clone(), &retry)
                .unwrap()
                .done()
                .expect("a retry with the answer is done")
                .joined_text()
        };
        assert_eq!(answer(json!({"action": "accept", "content": {"confirm": true}})), "Deleted books");
        assert_eq!(answer(json!({"action": "accept", "content": {"confirm": false}})), "books not deleted");
        assert_eq!(answer(json!({"action": "decline"})), "books not deleted");
        assert_eq!(answer(json!({"action": "cancel"})), "books not deleted");
        let refused = host.call_round::<ExampleTools>("delete_collection", arguments, &Round::new());
        assert!(refused.unwrap_err().message().contains("cannot ask"));
    }

    #[test]
    fn echo_returns_its_text() {
        let host = TestHost::new();
        assert_eq!(host.call::<ExampleTools>("echo", json!({"text": "hi"})).unwrap().joined_text(), "hi");
    }

    #[test]
    fn reindex_reports_each_step_and_releases_its_lock() {
        let dir = data_dir("reindex");
        let host = TestHost::new().data_dir(&*dir);
        let result =
            host.call::<ExampleTools>("reindex", json!({"collection": "c", "total": 100, "step_ms": 0}));
        assert_eq!(result.unwrap().joined_text(), "Reindexed 100 documents in c");
        let done: Vec<f64> = host.progress().iter().map(|report| report.done).collect();
        assert_eq!(done, [40.0, 80.0, 100.0]);
        assert_eq!(host.call::<ExampleTools>("locks", json!({})).unwrap().joined_text(), "[]");
        assert_eq!(host.note(), None, "a finished call leaves no note");
        // `40.0` is an integer to JSON Schema, and so to the host's check: the SDK reads it
        // as one too (a `u32` field refused it before).
        let whole =
            host.call::<ExampleTools>("reindex", json!({"collection": "d", "total": 40.0, "step_ms": 0}));
        assert_eq!(whole.unwrap().joined_text(), "Reindexed 40 documents in d");
        let fraction =
            host.call::<ExampleTools>("reindex", json!({"collection": "d", "total": 40.5, "step_ms": 0}));
        assert!(fraction.unwrap_err().message().contains("invalid arguments"));
    }

    #[test]
    fn a_cancelled_reindex_releases_its_lock_and_cleanup_releases_a_stopped_one() {
        let dir = data_dir("cancelled");
        let host = TestHost::new().data_dir(&*dir).cancel_after_checks(3);
        let error = host
            .call::<ExampleTools>("reindex", json!({"collection": "books", "total": 400, "step_ms": 0}))
            .unwrap_err();
        assert_eq!(error.message(), "cancelled");
        assert_eq!(host.progress().len(), 1, "one step finished before the cancel");
        // Returning, the lock's guard released it and cleared the note.
        assert_eq!(host.call::<ExampleTools>("locks", json!({})).unwrap().joined_text(), "[]");
        assert_eq!(host.note(), None);
        // A call stopped by force leaves both behind (its guard never drops); cleanup
        // releases the lock.
        std::mem::forget(Lock::acquire("books").unwrap());
        let held = host.call::<ExampleTools>("locks", json!({})).unwrap();
        assert_eq!(held.joined_text(), r#"["books"]"#);
        assert_eq!(held.structured, Some(json!(["books"])), "structured output may be an array");
        host.cleanup::<ExampleTools>("reindex", json!({"collection": "books"}), StopReason::Cancelled);
        assert_eq!(host.call::<ExampleTools>("locks", json!({})).unwrap().joined_text(), "[]");
        let logs = host.logs();
        assert_eq!(logs[0].1, "cleanup after reindex (Cancelled): released books");
    }

    /// Taking a lock passes this many stop points.
    const STOP_POINTS: usize = 3;

    /// Take lock `name`, stopped at stop point `stop` (none: not stopped there).
    fn acquire_stopped_at(name: &str, stop: Option<usize>) -> Result<Lock, ToolError> {
        STOP_AFTER.with(|left| left.set(stop));
        let taken = Lock::acquire(name);
        STOP_AFTER.with(|left| left.set(None));
        taken
    }

    #[test]
    fn cleanup_undoes_a_stop_anywhere_in_taking_a_lock_and_never_releases_another_call_s() {
        let dir = data_dir("stops");
        let host = TestHost::new().data_dir(&*dir);
        let locks = || host.call::<ExampleTools>("locks", json!({})).unwrap().joined_text();
        let files_left = || fs::read_dir(lock_dir()).unwrap().count();
        let stopped = |taken: Result<Lock, ToolError>| {
            let error = taken.err().expect("a stopped acquire fails");
            assert!(error.message().contains("stopped here by the test"), "{}", error.message());
        };
        let clean_up = || host.cleanup::<ExampleTools>("reindex", json!({}), StopReason::Cancelled);
        // Stopped at each point while taking a free lock, or while holding it (its guard
        // never drops): cleanup leaves nothing behind.
        for stop in 0..STOP_POINTS {
            stopped(acquire_stopped_at("books", Some(stop)));
            clean_up();
            assert_eq!((locks().as_str(), files_left()), ("[]", 0), "stopped at point {stop}");
        }
        std::mem::forget(acquire_stopped_at("books", None).unwrap());
        clean_up();
        assert_eq!((locks().as_str(), files_left()), ("[]", 0), "stopped holding the lock");
        // Another call holds it: a call stopped anywhere trying to take it, or refused, does
        // not release it in its cleanup.
        let other = acquire_stopped_at("books", None).unwrap();
        // Those stopped after the link (point 2, and holding) released it.
        let released_before = host.logs().len();
        assert_eq!(released_before, 2);
        for stop in 0..STOP_POINTS {
            stopped(acquire_stopped_at("books", Some(stop)));
            clean_up();
            assert_eq!((locks().as_str(), files_left()), (r#"["books"]"#, 1), "stopped at point {stop}");
        }
        let refused = acquire_stopped_at("books", None).err().expect("a held lock is refused");
        assert_eq!(refused.message(), "books is locked by another call");
        assert_eq!(host.note(), None, "a refused call leaves no note");
        clean_up();
        assert_eq!(locks(), r#"["books"]"#);
        assert_eq!(host.logs().len(), released_before, "no cleanup above said it released a lock");
        drop(other);
        assert_eq!((locks().as_str(), files_left()), ("[]", 0));
    }

    #[test]
    fn the_guide_reads_and_the_prompt_renders_and_completes() {
        let host = TestHost::new();
        let guide = host.read::<ExampleTools>("examples://guide").unwrap();
        assert!(
            matches!(guide, cordon_guest::ResourceBody::Text(text) if text.starts_with("# The example tools"))
        );
        assert_eq!(host.read::<ExampleTools>("examples://other"), Err(cordon_guest::ResourceError::NotFound));
        let messages =
            host.get_prompt::<ExampleTools>("reindex_collection", &[("collection", "music")]).unwrap();
        assert!(matches!(&messages[0].1, cordon_guest::Content::Text(text) if text.contains("\"music\"")));
        assert_eq!(host.complete_prompt::<ExampleTools>("reindex_collection", "collection", "m"), ["music"]);
    }

    #[test]
    fn fetch_says_outbound_http_needs_the_real_host() {
        let host = TestHost::new();
        let error = host.call::<ExampleTools>("fetch", json!({"url": "https://example.com"})).unwrap_err();
        assert!(error.message().contains("not available in the native test host"), "{}", error.message());
    }
}
