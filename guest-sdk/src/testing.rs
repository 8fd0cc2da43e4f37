//! A test host for `cargo test` on your machine: run a tool's logic and its SDK calls
//! without Wasm, and check its tool list with the host's own rules.
//!
//! ```
//! use cordon_guest::testing::{TestHost, check_tools};
//! use cordon_guest::{Plugin, StopReason, Tool, ToolError};
//!
//! fn count(args: serde_json::Value) -> Result<String, ToolError> {
//!     let to = args["to"].as_u64().unwrap_or(3);
//!     cordon_guest::set_cleanup_note(b"counting");
//!     for step in 1..=to {
//!         cordon_guest::check_cancelled()?;
//!         cordon_guest::progress(step as f64, Some(to as f64), "counting");
//!     }
//!     cordon_guest::clear_cleanup_note();
//!     Ok(format!("counted to {to}"))
//! }
//!
//! struct Counter;
//! impl Plugin for Counter {
//!     fn tools() -> Vec<Tool> {
//!         let schema = || serde_json::json!({"type": "object", "properties": {"to": {"type": "integer"}}});
//!         vec![Tool::with_schema("count", "Counts.", schema, count)]
//!     }
//! }
//!
//! check_tools::<Counter>().unwrap(); // what the host checks when it loads the component
//!
//! let host = TestHost::new();
//! let result = host.call::<Counter>("count", serde_json::json!({"to": 3})).unwrap();
//! assert_eq!(result.joined_text(), "counted to 3");
//! assert_eq!(host.progress().len(), 3);
//! assert_eq!(host.note(), None);
//!
//! let host = TestHost::new().cancel_after_checks(1); // the second check sees a cancel
//! assert_eq!(host.call::<Counter>("count", serde_json::json!({})).unwrap_err().message(), "cancelled");
//! assert_eq!(host.note_text().as_deref(), Some("counting"));
//! host.cleanup::<Counter>("count", serde_json::json!({}), StopReason::Cancelled);
//! ```
//!
//! A tool that keeps files under [`crate::data_dir`] gets a test's directory instead of
//! `/data` with [`TestHost::data_dir`].
//!
//! The state lives in a thread-local, and `cargo test` runs each test on its own thread,
//! so tests do not see each other's calls. Unlike the host, nothing here makes a fresh
//! instance per call: statics keep their values between calls in one test.

use std::cell::RefCell;
use std::time::Duration;

use crate::input::{Ask, Reply, Round};
use crate::{CallResult, CleanupContext, Content, LogLevel, Plugin, StopReason, ToolError};

/// What [`TestHost::call`] says of a tool that asked for input instead of answering.
fn asked(ask: &Ask) -> ToolError {
    let keys: Vec<&str> = ask.keys().collect();
    ToolError::new(format!("the tool asked for input ({}): use call_round", keys.join(", ")))
}

/// One progress report, as the host would have received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub done: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

#[derive(Default)]
struct State {
    cancelled: bool,
    /// Checks left before `cancelled()` turns true.
    checks_before_cancel: Option<u64>,
    time_left: Option<Duration>,
    progress: Vec<Progress>,
    note: Option<Vec<u8>>,
    logs: Vec<(LogLevel, String)>,
    data_dir: Option<std::path::PathBuf>,
    lists_changed: bool,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
    STATE.with(|state| f(&mut state.borrow_mut()))
}

/// The host, for this thread's calls: set it up, call tools, then look at what they did.
///
/// [`TestHost::new`] starts from a clean slate (no cancel, no time limit, nothing
/// recorded); the setters return the host, to chain.
#[derive(Debug)]
pub struct TestHost {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Default for TestHost {
    fn default() -> Self {
        Self::new()
    }
}

impl TestHost {
    /// A fresh test host for this thread.
    pub fn new() -> Self {
        with(|state| *state = State::default());
        Self { _not_send: std::marker::PhantomData }
    }

    /// The call is cancelled from now on: every [`crate::check_cancelled`] fails.
    pub fn cancel(self) -> Self {
        with(|state| state.cancelled = true);
        self
    }

    /// Let `checks` cancel checks pass, then cancel: the next check fails, as if the
    /// client cancelled while the tool worked.
    pub fn cancel_after_checks(self, checks: u64) -> Self {
        with(|state| state.checks_before_cancel = Some(checks));
        self
    }

    /// What [`crate::time_left`] returns (`None`, no limit, by default).
    pub fn time_left(self, left: Option<Duration>) -> Self {
        with(|state| state.time_left = left);
        self
    }

    /// What [`crate::data_dir`] returns in this test: a directory standing in for `/data`.
    pub fn data_dir(self, dir: impl Into<std::path::PathBuf>) -> Self {
        let dir = dir.into();
        with(|state| state.data_dir = Some(dir));
        self
    }

    /// Call `tool` of plugin `P` with `arguments`, as the host would (without the schema
    /// check: the handler's own decoding still refuses arguments of the wrong shape).
    pub fn call<P: Plugin>(&self, tool: &str, arguments: serde_json::Value) -> Result<CallResult, ToolError> {
        let tools = P::tools();
        let tool = tools
            .iter()
            .find(|candidate| candidate.name() == tool)
            .ok_or_else(|| ToolError::new(format!("unknown tool: {tool}")))?;
        match tool.run(&arguments.to_string(), &Round::new())? {
            Reply::Done(result) => Ok(result),
            Reply::Ask(ask) => Err(asked(&ask)),
        }
    }

    /// Call `tool` of plugin `P` with `arguments` in `round`, as the host would: what a tool
    /// made with [`Tool::asking`](crate::Tool::asking) answers, a result or what it asks.
    /// Answer it with the next round: `round.after(&ask).with_response(key, answer)`.
    ///
    /// ```
    /// use cordon_guest::input::{Ask, Reply, Round};
    /// use cordon_guest::testing::TestHost;
    /// use cordon_guest::{Plugin, Tool, ToolError};
    ///
    /// fn greet(_: serde_json::Value, round: &Round) -> Result<Reply<String>, ToolError> {
    ///     match round.response("name").and_then(|answer| answer["content"]["name"].as_str().map(str::to_owned)) {
    ///         Some(name) => Ok(Reply::Done(format!("Hello, {name}!"))),
    ///         None => Ok(Ask::new()
    ///             .elicit("name", "Your name?", serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}}}))
    ///             .into()),
    ///     }
    /// }
    ///
    /// struct Greeter;
    /// impl Plugin for Greeter {
    ///     fn tools() -> Vec<Tool> {
    ///         vec![Tool::asking("greet", "Greets you by name.", greet)]
    ///     }
    /// }
    ///
    /// let host = TestHost::new();
    /// let round = Round::new().with_elicitation();
    /// let ask = host.call_round::<Greeter>("greet", serde_json::json!({}), &round).unwrap().asked().unwrap();
    /// assert_eq!(ask.keys().collect::<Vec<_>>(), ["name"]);
    /// let retry = round.after(&ask).with_response("name", serde_json::json!({"action": "accept", "content": {"name": "Ada"}}));
    /// let result = host.call_round::<Greeter>("greet", serde_json::json!({}), &retry).unwrap().done().unwrap();
    /// assert_eq!(result.joined_text(), "Hello, Ada!");
    /// ```
    pub fn call_round<P: Plugin>(
        &self,
        tool: &str,
        arguments: serde_json::Value,
        round: &Round,
    ) -> Result<Reply<CallResult>, ToolError> {
        let tools = P::tools();
        let tool = tools
            .iter()
            .find(|candidate| candidate.name() == tool)
            .ok_or_else(|| ToolError::new(format!("unknown tool: {tool}")))?;
        tool.run(&arguments.to_string(), round)
    }

    /// Read `uri` from plugin `P` as the host would: one of its resources, or a URI one of
    /// its templates matches. Gives the body, or why there is none.
    pub fn read<P: Plugin>(&self, uri: &str) -> Result<crate::ResourceBody, crate::ResourceError> {
        use crate::bindings::exports::cordon::tool::resources::{Body, ReadError};
        match crate::features::glue::read::<P>(uri) {
            Ok(mut result) => match result.contents.remove(0).body {
                Body::Text(text) => Ok(crate::ResourceBody::Text(text)),
                Body::Blob(bytes) => Ok(crate::ResourceBody::Blob(bytes)),
            },
            Err(ReadError::NotFound) => Err(crate::ResourceError::NotFound),
            Err(ReadError::Failed(message)) => Err(crate::ResourceError::Failed(message)),
        }
    }

    /// Render prompt `name` of plugin `P` with `arguments` (without the host's check of
    /// required arguments); each message's role and content.
    pub fn get_prompt<P: Plugin>(
        &self,
        name: &str,
        arguments: &[(&str, &str)],
    ) -> Result<Vec<(crate::Role, Content)>, ToolError> {
        match self.get_prompt_round::<P>(name, arguments, &Round::new())? {
            Reply::Done(messages) => Ok(messages),
            Reply::Ask(ask) => Err(asked(&ask)),
        }
    }

    /// Render prompt `name` of plugin `P` in `round`: its messages, or what it asks.
    pub fn get_prompt_round<P: Plugin>(
        &self,
        name: &str,
        arguments: &[(&str, &str)],
        round: &Round,
    ) -> Result<Reply<Vec<(crate::Role, Content)>>, ToolError> {
        use crate::bindings::exports::cordon::tool::prompts::PromptReply;
        let arguments = arguments.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect();
        let reply = crate::features::glue::get_prompt::<P>(name, arguments, round.to_wit())
            .map_err(ToolError::new)?;
        Ok(match reply {
            PromptReply::Done(result) => Reply::Done(
                result.messages.into_iter().map(|message| (message.role, message.content)).collect(),
            ),
            PromptReply::NeedsInput(input) => Reply::Ask(crate::input::Ask::from_wit(input)),
        })
    }

    /// The values plugin `P` suggests for `argument` of prompt `prompt`, given `typed`.
    pub fn complete_prompt<P: Plugin>(&self, prompt: &str, argument: &str, typed: &str) -> Vec<String> {
        use crate::bindings::exports::cordon::tool::completions::Reference;
        crate::features::glue::complete::<P>(Reference::Prompt(prompt.into()), argument, typed, Vec::new())
            .map(|completion| completion.values)
            .unwrap_or_default()
    }

    /// Run `P`'s cleanup as the host would after a stopped call of `tool`, with the note
    /// the calls so far left.
    pub fn cleanup<P: Plugin>(&self, tool: &str, arguments: serde_json::Value, reason: StopReason) {
        P::cleanup(CleanupContext {
            call_id: "test".into(),
            tool: tool.into(),
            arguments,
            reason,
            note: self.note(),
        });
    }

    /// Every progress report so far, in order.
    pub fn progress(&self) -> Vec<Progress> {
        with(|state| state.progress.clone())
    }

    /// The cleanup note the calls left, if any.
    pub fn note(&self) -> Option<Vec<u8>> {
        with(|state| state.note.clone())
    }

    /// The note as text, if there is one and it is UTF-8.
    pub fn note_text(&self) -> Option<String> {
        self.note().and_then(|note| String::from_utf8(note).ok())
    }

    /// The lines written with [`crate::log`].
    pub fn logs(&self) -> Vec<(LogLevel, String)> {
        with(|state| state.logs.clone())
    }

    /// Whether a call said [`crate::lists_changed`]: the host would list the component
    /// again after it.
    pub fn lists_changed(&self) -> bool {
        with(|state| state.lists_changed)
    }
}

impl CallResult {
    /// The text items of the result, joined with newlines (handy in tests).
    pub fn joined_text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|item| match item {
                Content::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }
}

/// Check `P`'s tool list with the rules the host applies when it loads the component
/// (names, schemas, `x-mcp-header`; crate `cordon-rules`): `Err` says which tool breaks
/// which rule, as the host would refuse it.
pub fn check_tools<P: Plugin>() -> Result<(), cordon_rules::Violation> {
    let infos = crate::__private::list::<P>();
    let listed = infos.iter().map(|info| cordon_rules::ListedTool {
        name: &info.name,
        input_schema: &info.input_schema,
        output_schema: info.output_schema.as_deref(),
    });
    cordon_rules::check_tools(listed).map(|_| ())
}

/// The host's functions, natively: they read and write the test host's state.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(crate) mod native {
    use super::*;

    pub(crate) fn progress(done: f64, total: Option<f64>, message: Option<&str>) {
        with(|state| state.progress.push(Progress { done, total, message: message.map(str::to_owned) }));
    }

    pub(crate) fn cancelled() -> bool {
        with(|state| {
            match &mut state.checks_before_cancel {
                Some(0) => state.cancelled = true,
                Some(left) => *left -= 1,
                None => {}
            }
            state.cancelled
        })
    }

    pub(crate) fn time_left() -> Option<u64> {
        with(|state| state.time_left.map(|left| left.as_millis() as u64))
    }

    pub(crate) fn set_cleanup_note(note: &[u8]) {
        with(|state| state.note = (!note.is_empty()).then(|| note.to_vec()));
    }

    pub(crate) fn data_dir() -> std::path::PathBuf {
        with(|state| state.data_dir.clone()).unwrap_or_else(|| "/data".into())
    }

    pub(crate) fn log(level: LogLevel, message: &str) {
        with(|state| state.logs.push((level, message.to_owned())));
    }

    pub(crate) fn lists_changed() {
        with(|state| state.lists_changed = true);
    }
}
