//! # cordon-guest: write Cordon tools in Rust
//!
//! A Cordon tool is a typed Rust function inside a WebAssembly component. The host runs
//! every call in a fresh instance, can stop it at any instruction, and afterwards runs your
//! [`Plugin::cleanup`] in another fresh instance. This crate gives you the pieces:
//!
//! - [`Tool::new`] turns `fn(Args) -> Result<Output, ToolError>` into a tool; the arguments'
//!   JSON Schema is generated from `Args` (derive [`serde::Deserialize`] and
//!   [`schemars::JsonSchema`]), so the host rejects bad arguments before your code runs.
//! - [`progress`] reports progress; [`check_cancelled`] returns `Err` once the caller
//!   cancelled or a timeout passed, ready for `?`; [`time_left`] says how long remains.
//! - [`set_cleanup_note`] leaves a note outside the instance; `cleanup` gets it back.
//! - [`export_plugin!`] exports several tools and the cleanup handler from one component.
//! - [`http`] makes outbound HTTP requests, to what the operator grants the component
//!   (nothing by default), checking for a stop while it waits.
//! - [`Tool::asking`] makes a tool that may ask the client for input (a confirmation, a
//!   completion from its model, its roots) before it answers: [`input`] has an example.
//! - [`Resource`], [`ResourceTemplate`] and [`Prompt`] offer resources, prompts and
//!   completions besides tools ([`features`] has an example); each read runs in a fresh
//!   instance, like a call.
//!
//! A component built with this crate implements `cordon:tool@0.2.0`; a component that
//! declares no resources or prompts offers none, and works like a 0.1.0 one.
//!
//! ## Example
//!
//! ```no_run
//! use cordon_guest::{CleanupContext, Plugin, Tool, ToolError};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct ImportArgs {
//!     /// The file to import.
//!     path: String,
//! }
//!
//! fn import(args: ImportArgs) -> Result<String, ToolError> {
//!     cordon_guest::set_cleanup_note(args.path.as_bytes());
//!     for step in 1..=10 {
//!         cordon_guest::check_cancelled()?;
//!         // ... one step of real work ...
//!         cordon_guest::progress(step as f64, Some(10.0), &format!("step {step} of 10"));
//!     }
//!     cordon_guest::clear_cleanup_note(); // the import is complete: nothing to undo
//!     Ok(format!("imported {}", args.path))
//! }
//!
//! struct Importer;
//!
//! impl Plugin for Importer {
//!     fn tools() -> Vec<Tool> {
//!         vec![Tool::new("import", "Imports a file.", import)]
//!     }
//!
//!     fn cleanup(context: CleanupContext) {
//!         if let Some(path) = context.note_text() {
//!             cordon_guest::log(cordon_guest::LogLevel::Warn, &format!("rolling back {path}"));
//!         }
//!     }
//! }
//!
//! cordon_guest::export_plugin!(Importer);
//! ```
//!
//! Build it for `wasm32-wasip2` as a `cdylib`; the resulting `.wasm` file is the component.
//!
//! ## Memory: room for the heap up front
//!
//! A Rust component starts with just its stack and static data (about 1 MiB), so its first
//! allocations in every call grow the linear memory. The host must change page protections
//! to grow it, and again to shrink it for the next fresh instance: a few `mprotect` calls
//! and TLB flushes per call, a quarter of a short call's cost (the example `echo`: 35 µs
//! per call without it, 26 µs with it). This crate's build script therefore links every
//! component that depends on it with 2 MiB of initial memory (the 1 MiB stack plus 1 MiB
//! of heap; copy-on-write keeps the pages a call does not touch free): your crate needs no
//! `build.rs` of its own.
//!
//! ## Testing a tool natively
//!
//! `cargo test` runs on your machine, not in Wasm; [`testing::TestHost`] stands in for the
//! host there: it records progress, the note and log lines, lets a test cancel the call or
//! set the time left, runs the cleanup with the note the call left, and checks the tool
//! list with the host's own rules ([`testing::check_tools`]). Every function of this crate
//! works in such a test except outbound HTTP, which returns an error.
//!
//! ## Panics
//!
//! A panic in a tool stops the call (the component traps). The panic message, with its
//! source location, is written to stderr as one line; the host puts the last line a
//! trapped guest wrote to stderr in the error the client sees and in the
//! [`StopReason::Trapped`] text the cleanup gets.

use std::fmt;
use std::time::Duration;

pub mod features;
pub mod http;
pub mod input;
pub mod testing;

pub use features::{
    Found, Prompt, PromptArguments, PromptMessage, Resource, ResourceBody, ResourceError, ResourceTemplate,
    Role,
};

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit/v0.2.0",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "__export_plugin_bindings",
        default_bindings_module: "::cordon_guest::bindings",
    });
}

use bindings::cordon::tool::types as wit;

/// The host's functions: the component's imports in Wasm, the test host natively (where
/// wit-bindgen's imports would panic).
mod host {
    #[cfg(target_arch = "wasm32")]
    pub(crate) use crate::bindings::cordon::tool::host::{
        cancelled, lists_changed, log, progress, set_cleanup_note, time_left,
    };
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) use crate::testing::native::{
        cancelled, lists_changed, log, progress, set_cleanup_note, time_left,
    };
}

pub use bindings::cordon::tool::types::LogLevel;

/// The tools of a component and what to do after a stopped call.
///
/// Implement it on a unit struct and pass the struct to [`export_plugin!`].
pub trait Plugin {
    /// Every tool the component offers. Called for each call (instances are fresh), so keep
    /// it cheap: build the list, do no work.
    fn tools() -> Vec<Tool>;

    /// The resources at fixed URIs the component offers (`resources/list`, `resources/read`).
    /// Listed when the host loads the component (and again after [`lists_changed`]); read
    /// each in a fresh instance.
    fn resources() -> Vec<Resource> {
        Vec::new()
    }

    /// The resource templates the component offers (`resources/templates/list`): every URI
    /// one matches is read through it. For resources that come and go (files, records).
    fn resource_templates() -> Vec<ResourceTemplate> {
        Vec::new()
    }

    /// The prompts the component offers (`prompts/list`, `prompts/get`).
    fn prompts() -> Vec<Prompt> {
        Vec::new()
    }

    /// Undo what a stopped call left behind. Runs exactly once, in a fresh instance with a
    /// short time budget, after a call that did not finish on its own terms: one the host
    /// stopped by force (after the grace period) or that trapped, and one that returned an
    /// `Err` after it was asked to stop (the `check_cancelled()?` path). A call that returns
    /// `Ok`, even after a cancel, is complete: no cleanup runs, and its note is dropped.
    /// It must be idempotent and rely only on state outside the instance: files in the
    /// tool's data directory and the note left with [`set_cleanup_note`] (so clear the note
    /// once the work it names is committed or undone).
    fn cleanup(context: CleanupContext) {
        let _ = context;
    }
}

/// Report progress: `done` out of `total` (if known), with a message for people.
///
/// `done` must grow between reports; the host drops reports that do not grow and coalesces
/// bursts. Each report also resets the tool's idle timeout.
pub fn progress(done: f64, total: Option<f64>, message: &str) {
    host::progress(done, total, (!message.is_empty()).then_some(message));
}

/// `Err(Cancelled)` once the call should stop (the client cancelled it, a timeout passed or
/// the host is shutting down). Check it between units of work and propagate it with `?`.
///
/// Once a call has checked, a stop also ends the wait it is parked in (a sleep, a poll) at
/// once, so check again after every wait: a sleep that returns may have been cut short.
pub fn check_cancelled() -> Result<(), Cancelled> {
    if host::cancelled() { Err(Cancelled) } else { Ok(()) }
}

/// Time left before the host stops this call, or `None` when no limit applies.
pub fn time_left() -> Option<Duration> {
    host::time_left().map(Duration::from_millis)
}

/// Leave a note for [`Plugin::cleanup`], kept by the host outside the instance. A new note
/// replaces the previous one; an empty note clears it. A note over the tool's limit (64 KiB
/// by default) traps the call.
///
/// The host may stop a call between any two instructions, so leave the note *before* the
/// effect it undoes, and let `cleanup` tell whether the effect happened: a lock file taken
/// after the note, say, holds a token the note names too, so `cleanup` never releases a
/// lock this call did not take (the example tools' `Lock` does this).
pub fn set_cleanup_note(note: &[u8]) {
    host::set_cleanup_note(note);
}

/// Clear the cleanup note: nothing is left to undo.
pub fn clear_cleanup_note() {
    host::set_cleanup_note(&[]);
}

/// The tool's data directory: `/data` in a component (when the operator grants one), and
/// natively the directory a test gave [`testing::TestHost::data_dir`] (else `/data`).
pub fn data_dir() -> std::path::PathBuf {
    #[cfg(target_arch = "wasm32")]
    return std::path::PathBuf::from("/data");
    #[cfg(not(target_arch = "wasm32"))]
    return testing::native::data_dir();
}

/// Write a line to the operator's log; a client that asked for this level (or a lower one)
/// also gets it, as an MCP `notifications/message` named after the tool (rate-limited: a
/// call sends at most a few dozen lines a second, and says how many it dropped).
pub fn log(level: LogLevel, message: &str) {
    host::log(level, message);
}

/// Say that [`Plugin::tools`] (or the resources, templates or prompts) may now list
/// something else, because this call changed the state they are built from (a file in
/// [`data_dir`]). When the call ends, the host lists the component again in a fresh
/// instance and, if a list differs, serves the new one and tells the clients that follow
/// changes (`notifications/tools/list_changed`, and the prompts' and resources' own).
/// Cheap to call; the host coalesces requests (at most one new listing every 250 ms per
/// component).
///
/// ```
/// use cordon_guest::testing::TestHost;
/// use cordon_guest::{Plugin, Tool, ToolError};
///
/// /// `enable_beta` adds the `beta` tool to the list from now on.
/// fn enable_beta(_: serde_json::Value) -> Result<String, ToolError> {
///     std::fs::write(cordon_guest::data_dir().join("beta"), b"on")?;
///     cordon_guest::lists_changed();
///     Ok("beta enabled".into())
/// }
///
/// fn beta(_: serde_json::Value) -> Result<String, ToolError> {
///     Ok("β".into())
/// }
///
/// struct Tools;
/// impl Plugin for Tools {
///     fn tools() -> Vec<Tool> {
///         let mut tools = vec![Tool::new("enable_beta", "Turn on the beta tool.", enable_beta)];
///         if cordon_guest::data_dir().join("beta").exists() {
///             tools.push(Tool::new("beta", "The beta tool.", beta));
///         }
///         tools
///     }
/// }
///
/// let data = std::env::temp_dir().join(format!("lists-changed-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&data).unwrap();
/// let host = TestHost::new().data_dir(&data);
/// assert!(host.call::<Tools>("beta", serde_json::json!({})).is_err());
/// host.call::<Tools>("enable_beta", serde_json::json!({})).unwrap();
/// assert!(host.lists_changed());
/// assert_eq!(host.call::<Tools>("beta", serde_json::json!({})).unwrap().joined_text(), "β");
/// # std::fs::remove_dir_all(&data).unwrap();
/// ```
pub fn lists_changed() {
    host::lists_changed();
}

/// The error [`check_cancelled`] returns once the call should stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled;

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cancelled")
    }
}

impl std::error::Error for Cancelled {}

/// A tool's failure, shown to the client as an error result (`isError: true`).
///
/// Any [`std::error::Error`] converts into it, so `?` works on I/O, JSON and [`Cancelled`]
/// errors alike; [`ToolError::new`] makes one from a message.
#[derive(Debug)]
pub struct ToolError(String);

impl ToolError {
    /// A failure with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// The message the client will see.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for ToolError {
    fn from(error: E) -> Self {
        let mut message = error.to_string();
        // WASI's words for a path under no directory the host granted (ENOTCAPABLE, and
        // std's own message where it looks the preopens up itself).
        if message.contains("Capabilities insufficient") || message.contains("pre-opened file descriptor") {
            message.push_str(NO_GRANT_HINT);
        }
        Self(message)
    }
}

/// Added to a file-system error for a path no grant covers: which config key grants one.
const NO_GRANT_HINT: &str = " (no directory the host granted holds this path: the operator grants \
    `data_dir` in the component's [[components]] entry, seen at /data, or a `[[components.mounts]]` \
    entry, seen at its `guest` path; `cordon call` grants a data directory at /data, chosen with \
    --data-dir)";

/// One piece of a result. See [`CallResult`].
pub use bindings::cordon::tool::types::Content;
/// A resource whose contents travel in the result, for embedded-resource content.
pub use bindings::cordon::tool::types::EmbeddedResource;
/// Bytes with a media type, for image and audio content.
pub use bindings::cordon::tool::types::Media;
/// A link to a resource, for resource-link content.
pub use bindings::cordon::tool::types::ResourceLink;

/// A tool's full result: content for the model, optional structured JSON, and an error flag.
#[derive(Debug, Clone, Default)]
pub struct CallResult {
    /// Content for the model, in order.
    pub content: Vec<Content>,
    /// Structured JSON that matches the tool's output schema.
    pub structured: Option<serde_json::Value>,
    /// The tool ran but failed in a way the model should see.
    pub is_error: bool,
}

impl CallResult {
    /// A result with one text item.
    pub fn text(text: impl Into<String>) -> Self {
        Self { content: vec![Content::Text(text.into())], ..Self::default() }
    }

    /// Add a content item.
    pub fn with(mut self, content: Content) -> Self {
        self.content.push(content);
        self
    }
}

/// What a tool function may return: text, a [`CallResult`], or [`Json`] for structured output.
pub trait IntoCallResult {
    /// The JSON Schema of the structured result, when the type has one.
    fn output_schema() -> Option<serde_json::Value> {
        None
    }

    /// Convert into the result sent to the host.
    fn into_call_result(self) -> Result<CallResult, ToolError>;
}

impl IntoCallResult for String {
    fn into_call_result(self) -> Result<CallResult, ToolError> {
        Ok(CallResult::text(self))
    }
}

impl IntoCallResult for &'static str {
    fn into_call_result(self) -> Result<CallResult, ToolError> {
        Ok(CallResult::text(self))
    }
}

impl IntoCallResult for CallResult {
    fn into_call_result(self) -> Result<CallResult, ToolError> {
        Ok(self)
    }
}

/// Structured output: the value is sent as `structuredContent` (and as JSON text for clients
/// that only read content), and the tool advertises `T`'s schema as its output schema.
/// `T` may be any type: a struct, a `Vec`, a string... (MCP 2026-07-28 takes any JSON
/// value; a 2025-11-25 client is sent structured output only when it is an object, and
/// reads the rest from the text.)
///
/// ```
/// use cordon_guest::{IntoCallResult, Json};
///
/// let schema = <Json<Vec<String>> as IntoCallResult>::output_schema().unwrap();
/// assert_eq!(schema["type"], "array");
/// let result = Json(vec!["books".to_owned()]).into_call_result().unwrap();
/// assert_eq!(result.structured, Some(serde_json::json!(["books"])));
/// ```
pub struct Json<T>(pub T);

impl<T: Serialize + JsonSchema> IntoCallResult for Json<T> {
    fn output_schema() -> Option<serde_json::Value> {
        Some(output_schema_of::<T>())
    }

    fn into_call_result(self) -> Result<CallResult, ToolError> {
        let value = serde_json::to_value(&self.0)?;
        Ok(CallResult {
            content: vec![Content::Text(value.to_string())],
            structured: Some(value),
            is_error: false,
        })
    }
}

/// Takes the arguments as JSON text: they are read straight into the handler's type, so
/// properties the type does not name are skipped without ever being built in memory.
type Handler = Box<dyn Fn(&str, &input::Round) -> Result<input::Reply<CallResult>, ToolError>>;

/// A tool: its name, description, schemas and the function that runs it.
///
/// Schemas are generated only when the host lists the tools, never on a call.
pub struct Tool {
    name: String,
    title: Option<String>,
    description: String,
    input_schema: fn() -> serde_json::Value,
    output_schema: fn() -> Option<serde_json::Value>,
    annotations: Option<wit::ToolAnnotations>,
    requires: Vec<String>,
    handler: Handler,
}

impl Tool {
    /// A tool named `name` that runs `handler`. The input schema comes from `A`; if the
    /// handler returns [`Json<T>`], the output schema comes from `T`.
    pub fn new<A, R, F>(name: &str, description: &str, handler: F) -> Self
    where
        A: DeserializeOwned + JsonSchema,
        R: IntoCallResult,
        F: Fn(A) -> Result<R, ToolError> + 'static,
    {
        Self::asking(name, description, move |arguments: A, _: &input::Round| {
            handler(arguments).map(input::Reply::Done)
        })
    }

    /// A tool that may ask the client for input before it answers ([`input`]): `handler`
    /// also gets the call's [`input::Round`] and answers [`input::Reply::Done`] with its
    /// result or [`input::Reply::Ask`] with what it needs; it runs again, in a fresh
    /// instance, once the client has answered.
    pub fn asking<A, R, F>(name: &str, description: &str, handler: F) -> Self
    where
        A: DeserializeOwned + JsonSchema,
        R: IntoCallResult,
        F: Fn(A, &input::Round) -> Result<input::Reply<R>, ToolError> + 'static,
    {
        let handler = Box::new(move |arguments: &str, round: &input::Round| {
            let arguments = parse_arguments(arguments)?;
            Ok(match handler(arguments, round)? {
                input::Reply::Done(result) => input::Reply::Done(result.into_call_result()?),
                input::Reply::Ask(ask) => input::Reply::Ask(ask),
            })
        });
        Self {
            name: name.to_owned(),
            title: None,
            description: description.to_owned(),
            input_schema: schema_of::<A>,
            output_schema: R::output_schema,
            annotations: None,
            requires: Vec::new(),
            handler,
        }
    }

    /// A tool whose input schema is written by hand (any JSON Schema 2020-12, root
    /// `type: object`) instead of generated; the handler gets the arguments as JSON.
    pub fn with_schema<R, F>(
        name: &str,
        description: &str,
        input_schema: fn() -> serde_json::Value,
        handler: F,
    ) -> Self
    where
        R: IntoCallResult,
        F: Fn(serde_json::Value) -> Result<R, ToolError> + 'static,
    {
        let mut tool = Self::new(name, description, handler);
        tool.input_schema = input_schema;
        tool
    }

    /// Run the tool on arguments given as JSON text, in `round`.
    pub(crate) fn run(
        &self,
        arguments: &str,
        round: &input::Round,
    ) -> Result<input::Reply<CallResult>, ToolError> {
        (self.handler)(arguments, round)
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn info(self) -> wit::ToolInfo {
        wit::ToolInfo {
            name: self.name,
            title: self.title,
            description: self.description,
            input_schema: (self.input_schema)().to_string(),
            output_schema: (self.output_schema)().map(|schema| schema.to_string()),
            annotations: self.annotations,
            requires: self.requires,
        }
    }

    /// A display name for people.
    pub fn title(mut self, title: &str) -> Self {
        self.title = Some(title.to_owned());
        self
    }

    /// Declare a client capability the tool needs (e.g. `"sampling"`): calls from clients
    /// that did not declare it are refused before the tool runs.
    pub fn requires(mut self, capability: &str) -> Self {
        self.requires.push(capability.to_owned());
        self
    }

    /// Mark the tool as read-only (it changes nothing).
    pub fn read_only(mut self) -> Self {
        self.annotations().read_only = Some(true);
        self
    }

    /// Mark the tool as destructive (it may overwrite or delete data).
    pub fn destructive(mut self) -> Self {
        self.annotations().destructive = Some(true);
        self
    }

    /// Mark the tool as idempotent.
    pub fn idempotent(mut self) -> Self {
        self.annotations().idempotent = Some(true);
        self
    }

    /// Mark the tool as talking to an open world of external entities (e.g. the web).
    pub fn open_world(mut self) -> Self {
        self.annotations().open_world = Some(true);
        self
    }

    fn annotations(&mut self) -> &mut wit::ToolAnnotations {
        self.annotations.get_or_insert(wit::ToolAnnotations {
            read_only: None,
            destructive: None,
            idempotent: None,
            open_world: None,
        })
    }
}

/// Why a call was stopped; see [`CleanupContext`].
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// The client cancelled the call.
    Cancelled,
    /// No progress for longer than the idle timeout.
    IdleTimeout,
    /// The call ran past its maximum duration.
    MaxDuration,
    /// The guest trapped, with the trap message.
    Trapped(String),
    /// The guest ran out of memory.
    OutOfMemory,
    /// The host is shutting down.
    Shutdown,
}

/// What [`Plugin::cleanup`] is told about the stopped call.
#[derive(Debug, Clone)]
pub struct CleanupContext {
    /// The host's id of the stopped call.
    pub call_id: String,
    /// The tool that was called.
    pub tool: String,
    /// The call's arguments.
    pub arguments: serde_json::Value,
    /// Why it stopped.
    pub reason: StopReason,
    /// The last note the call left with [`set_cleanup_note`].
    pub note: Option<Vec<u8>>,
}

impl CleanupContext {
    /// The note as UTF-8 text, if there is one and it is text.
    pub fn note_text(&self) -> Option<&str> {
        self.note.as_deref().and_then(|note| std::str::from_utf8(note).ok())
    }
}

/// Export a [`Plugin`]'s tools and cleanup handler from this component.
///
/// Use it once per component, at the crate root: `cordon_guest::export_plugin!(MyTools);`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        const _: () = {
            struct CordonExport;

            impl $crate::bindings::exports::cordon::tool::tool::Guest for CordonExport {
                fn list() -> ::std::vec::Vec<$crate::bindings::cordon::tool::types::ToolInfo> {
                    $crate::__private::list::<$plugin>()
                }

                fn call(
                    name: ::std::string::String,
                    arguments: ::std::string::String,
                    input: $crate::bindings::cordon::tool::input::InputRound,
                ) -> ::std::result::Result<
                    $crate::bindings::exports::cordon::tool::tool::CallReply,
                    ::std::string::String,
                > {
                    $crate::__private::call::<$plugin>(&name, &arguments, input)
                }

                fn cleanup(context: $crate::bindings::cordon::tool::types::CleanupContext) {
                    $crate::__private::cleanup::<$plugin>(context)
                }
            }

            impl $crate::bindings::exports::cordon::tool::resources::Guest for CordonExport {
                fn list() -> $crate::bindings::exports::cordon::tool::resources::Catalog {
                    $crate::features::glue::list_resources::<$plugin>()
                }

                fn read(
                    uri: ::std::string::String,
                ) -> ::std::result::Result<
                    $crate::bindings::exports::cordon::tool::resources::ReadResult,
                    $crate::bindings::exports::cordon::tool::resources::ReadError,
                > {
                    $crate::features::glue::read::<$plugin>(&uri)
                }
            }

            impl $crate::bindings::exports::cordon::tool::prompts::Guest for CordonExport {
                fn list() -> ::std::vec::Vec<$crate::bindings::exports::cordon::tool::prompts::PromptInfo> {
                    $crate::features::glue::list_prompts::<$plugin>()
                }

                fn get(
                    name: ::std::string::String,
                    arguments: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
                    input: $crate::bindings::cordon::tool::input::InputRound,
                ) -> ::std::result::Result<
                    $crate::bindings::exports::cordon::tool::prompts::PromptReply,
                    ::std::string::String,
                > {
                    $crate::features::glue::get_prompt::<$plugin>(&name, arguments, input)
                }
            }

            impl $crate::bindings::exports::cordon::tool::completions::Guest for CordonExport {
                fn complete(
                    reference: $crate::bindings::exports::cordon::tool::completions::Reference,
                    argument: ::std::string::String,
                    value: ::std::string::String,
                    context: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
                ) -> ::std::result::Result<
                    $crate::bindings::exports::cordon::tool::completions::Completion,
                    ::std::string::String,
                > {
                    $crate::features::glue::complete::<$plugin>(reference, &argument, &value, context)
                }
            }

    $crate::bindings::__export_plugin_bindings!(CordonExport with_types_in $crate::bindings);
        };
    };
}

/// The glue behind [`export_plugin!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    use super::*;

    pub fn list<P: Plugin>() -> Vec<wit::ToolInfo> {
        install_panic_hook();
        P::tools().into_iter().map(Tool::info).collect()
    }

    pub fn call<P: Plugin>(
        name: &str,
        arguments: &str,
        round: crate::bindings::cordon::tool::input::InputRound,
    ) -> Result<crate::bindings::exports::cordon::tool::tool::CallReply, String> {
        use crate::bindings::exports::cordon::tool::tool::CallReply;
        install_panic_hook();
        let tool = P::tools()
            .into_iter()
            .find(|tool| tool.name == name)
            .ok_or_else(|| format!("unknown tool: {name}"))?;
        Ok(match (tool.handler)(arguments, &input::Round::from_wit(round)).map_err(|error| error.0)? {
            input::Reply::Done(result) => CallReply::Done(wit::CallResult {
                content: result.content,
                structured: result.structured.map(|value| value.to_string()),
                is_error: result.is_error,
            }),
            input::Reply::Ask(ask) => CallReply::NeedsInput(ask.into_wit()),
        })
    }

    pub fn cleanup<P: Plugin>(context: wit::CleanupContext) {
        install_panic_hook();
        let reason = match context.reason {
            wit::StopReason::Cancelled => StopReason::Cancelled,
            wit::StopReason::IdleTimeout => StopReason::IdleTimeout,
            wit::StopReason::MaxDuration => StopReason::MaxDuration,
            wit::StopReason::Trapped(message) => StopReason::Trapped(message),
            wit::StopReason::OutOfMemory => StopReason::OutOfMemory,
            wit::StopReason::Shutdown => StopReason::Shutdown,
        };
        P::cleanup(CleanupContext {
            call_id: context.call_id,
            tool: context.tool,
            arguments: serde_json::from_str(&context.arguments).unwrap_or(serde_json::Value::Null),
            reason,
            note: context.note,
        });
    }

    /// A panic's message and location on stderr as one line, which the host quotes in the
    /// error the client sees and in the cleanup's trap reason (std's own hook writes three
    /// lines, the last a note about backtraces). Natively, std's hook stays: a test shows
    /// panics as usual. Every export calls it first: each request may run in a fresh
    /// instance that never ran another export (a `resources/read` never lists tools).
    pub(crate) fn install_panic_hook() {
        #[cfg(target_arch = "wasm32")]
        {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                std::panic::set_hook(Box::new(|info| {
                    let message = info.payload_as_str().unwrap_or("(a non-text panic payload)");
                    let message = message.replace('\n', " / ");
                    match info.location() {
                        Some(at) => eprintln!("panicked at {}:{}: {message}", at.file(), at.line()),
                        None => eprintln!("panicked: {message}"),
                    }
                }));
            });
        }
    }
}

/// A call's arguments as `A`. JSON Schema's `integer` takes `5.0` (the host checked the
/// arguments so), and serde's integers do not: when they fail to read, whole numbers
/// written with a fraction are read as integers, and they are read again. (Only then: a
/// call whose arguments read pays nothing.)
fn parse_arguments<A: DeserializeOwned>(text: &str) -> Result<A, ToolError> {
    let invalid = |error: serde_json::Error| ToolError::new(format!("invalid arguments: {error}"));
    let first = match serde_json::from_str(text) {
        Ok(arguments) => return Ok(arguments),
        Err(error) => error,
    };
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(text) else { return Err(invalid(first)) };
    if !whole_floats_as_integers(&mut value) {
        return Err(invalid(first));
    }
    serde_json::from_value(value).map_err(|_| invalid(first))
}

/// Rewrite each float in `value` with no fraction (within i64) as an integer; whether any was.
fn whole_floats_as_integers(value: &mut serde_json::Value) -> bool {
    match value {
        serde_json::Value::Number(number) if number.is_f64() => {
            let float = number.as_f64().unwrap_or(f64::NAN);
            if float.fract() == 0.0 && float.abs() < 9.0e15 {
                *value = serde_json::Value::from(float as i64);
                return true;
            }
            false
        }
        serde_json::Value::Array(items) => {
            items.iter_mut().fold(false, |any, item| whole_floats_as_integers(item) | any)
        }
        serde_json::Value::Object(fields) => {
            fields.values_mut().fold(false, |any, field| whole_floats_as_integers(field) | any)
        }
        _ => false,
    }
}

/// `T`'s schema as an output schema: a JSON object (schemars' `true`, for any value, is
/// `{}`), with `"type": "object"` added at a type-less root only where every form it
/// allows is an object (an enum of structs), so that 2025-11-25 clients are shown it.
fn output_schema_of<T: JsonSchema>() -> serde_json::Value {
    let schema = schemars::schema_for!(T).to_value();
    let serde_json::Value::Object(mut root) = schema else {
        return serde_json::json!({});
    };
    let is_object =
        |schema: &serde_json::Value| schema.get("type").and_then(serde_json::Value::as_str) == Some("object");
    let all_objects = ["oneOf", "anyOf"].iter().any(|keyword| {
        root.get(*keyword)
            .and_then(serde_json::Value::as_array)
            .is_some_and(|forms| !forms.is_empty() && forms.iter().all(is_object))
    });
    if !root.contains_key("type") && (root.contains_key("properties") || all_objects) {
        root.insert("type".into(), "object".into());
    }
    serde_json::Value::Object(root)
}

/// The JSON Schema of `T` as an input schema, as MCP wants it: root `type: object`.
fn schema_of<T: JsonSchema>() -> serde_json::Value {
    let mut schema = schemars::schema_for!(T).to_value();
    if let Some(object) = schema.as_object_mut() {
        object.entry("type").or_insert_with(|| "object".into());
    }
    schema
}
