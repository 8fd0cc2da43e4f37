//! Resources, prompts and completions (`cordon:tool@0.2.0`): what a component offers
//! besides tools. Declare them in [`Plugin::resources`], [`Plugin::resource_templates`]
//! and [`Plugin::prompts`](crate::Plugin::prompts); completions hang off the prompt
//! argument or template variable they complete.
//!
//! Like a tool call, every read, prompt and completion runs in a fresh instance, with the
//! component's limits, and can be stopped at any instruction ([`crate::check_cancelled`]
//! works there too); after a stop, [`Plugin::cleanup`](crate::Plugin::cleanup) runs with
//! `tool` set to the method (`resources/read`, `prompts/get`, `completion/complete`).
//!
//! ```no_run
//! use cordon_guest::{Plugin, Prompt, PromptMessage, Resource, ResourceBody, ResourceError, ResourceTemplate, Tool};
//!
//! struct Notes;
//!
//! impl Plugin for Notes {
//!     fn tools() -> Vec<Tool> {
//!         Vec::new()
//!     }
//!
//!     fn resources() -> Vec<Resource> {
//!         vec![Resource::new("notes://readme", "readme", || Ok(ResourceBody::text("How to use the notes.")))
//!             .mime_type("text/plain")]
//!     }
//!
//!     fn resource_templates() -> Vec<ResourceTemplate> {
//!         vec![ResourceTemplate::new("notes://{id}", "note", |found| match found.get("id") {
//!             Some("1") => Ok(ResourceBody::text("The first note.")),
//!             _ => Err(ResourceError::NotFound),
//!         })
//!         .complete("id", |typed, _| ["1", "2", "3"].iter().filter(|id| id.starts_with(typed)).map(|id| id.to_string()).collect())]
//!     }
//!
//!     fn prompts() -> Vec<Prompt> {
//!         vec![Prompt::new("summarize", "Summarize a note.", |arguments| {
//!             let id = arguments.required("id")?;
//!             Ok(vec![PromptMessage::user_text(format!("Summarize note {id}."))])
//!         })
//!         .argument("id", "The note to summarize.", true)]
//!     }
//! }
//!
//! cordon_guest::export_plugin!(Notes);
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::bindings::exports::cordon::tool::{
    completions as wit_completions, prompts as wit_prompts, resources as wit_resources,
};
use crate::input::{Reply, Round};
use crate::{Content, ToolError};

/// A resource's body: text or bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum ResourceBody {
    Text(String),
    Blob(Vec<u8>),
}

impl ResourceBody {
    /// A text body.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(text.into())
    }

    /// A binary body (the host base64-encodes it for the client).
    pub fn blob(bytes: impl Into<Vec<u8>>) -> Self {
        Self::Blob(bytes.into())
    }
}

/// Why a read gave no body.
#[derive(Debug, Clone, PartialEq)]
pub enum ResourceError {
    /// There is no such resource: the client gets "Resource not found" with the URI.
    NotFound,
    /// The read failed; the client sees the message.
    Failed(String),
}

impl<E: std::error::Error> From<E> for ResourceError {
    fn from(error: E) -> Self {
        Self::Failed(ToolError::from(error).message().to_owned())
    }
}

impl fmt::Display for ResourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound => f.write_str("not found"),
            Self::Failed(message) => f.write_str(message),
        }
    }
}

type Reader = Box<dyn Fn() -> Result<ResourceBody, ResourceError>>;
type TemplateReader = Box<dyn Fn(&Found) -> Result<ResourceBody, ResourceError>>;
/// Suggests values from what was typed and the arguments already chosen.
type Completer = Box<dyn Fn(&str, &BTreeMap<String, String>) -> Vec<String>>;

/// A resource at a fixed URI, listed by `resources/list`.
pub struct Resource {
    info: wit_resources::ResourceInfo,
    ttl: Option<Duration>,
    read: Reader,
}

impl Resource {
    /// The resource at `uri` (unique across the server), called `name`, whose body `read`
    /// makes (in a fresh instance, when a client reads it).
    pub fn new(
        uri: &str,
        name: &str,
        read: impl Fn() -> Result<ResourceBody, ResourceError> + 'static,
    ) -> Self {
        Self {
            info: wit_resources::ResourceInfo {
                uri: uri.to_owned(),
                name: name.to_owned(),
                title: None,
                description: None,
                mime_type: None,
                size: None,
            },
            ttl: None,
            read: Box::new(read),
        }
    }

    /// What it holds, for the model and for people.
    pub fn description(mut self, description: &str) -> Self {
        self.info.description = Some(description.to_owned());
        self
    }

    /// A display name.
    pub fn title(mut self, title: &str) -> Self {
        self.info.title = Some(title.to_owned());
        self
    }

    /// Its media type, e.g. `text/markdown`.
    pub fn mime_type(mut self, mime_type: &str) -> Self {
        self.info.mime_type = Some(mime_type.to_owned());
        self
    }

    /// Its size in bytes, when known.
    pub fn size(mut self, bytes: u64) -> Self {
        self.info.size = Some(bytes);
        self
    }

    /// How long a client may reuse what it read (none: read every time).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The resource's URI.
    pub fn uri(&self) -> &str {
        &self.info.uri
    }
}

/// A URI that matched a template, and its variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The URI read.
    pub uri: String,
    /// Each variable's value, in the template's order.
    pub variables: Vec<(String, String)>,
}

impl Found {
    /// The value of `variable`.
    pub fn get(&self, variable: &str) -> Option<&str> {
        self.variables.iter().find(|(name, _)| name == variable).map(|(_, value)| value.as_str())
    }
}

/// A family of resources, one per value of the template's `{variables}`, listed by
/// `resources/templates/list`; the host routes every URI it matches here.
pub struct ResourceTemplate {
    info: wit_resources::ResourceTemplate,
    ttl: Option<Duration>,
    read: TemplateReader,
    completers: Vec<(String, Completer)>,
}

impl ResourceTemplate {
    /// The template `uri_template` (e.g. `notes://{collection}/{id}`: each variable stands
    /// for a non-empty run of characters without `/`), called `name`, whose resources
    /// `read` makes from the URI and its variables ([`Found`]). Return
    /// [`ResourceError::NotFound`] for values that name nothing.
    pub fn new(
        uri_template: &str,
        name: &str,
        read: impl Fn(&Found) -> Result<ResourceBody, ResourceError> + 'static,
    ) -> Self {
        Self {
            info: wit_resources::ResourceTemplate {
                uri_template: uri_template.to_owned(),
                name: name.to_owned(),
                title: None,
                description: None,
                mime_type: None,
            },
            ttl: None,
            read: Box::new(read),
            completers: Vec::new(),
        }
    }

    /// What its resources hold.
    pub fn description(mut self, description: &str) -> Self {
        self.info.description = Some(description.to_owned());
        self
    }

    /// A display name.
    pub fn title(mut self, title: &str) -> Self {
        self.info.title = Some(title.to_owned());
        self
    }

    /// The media type of its resources.
    pub fn mime_type(mut self, mime_type: &str) -> Self {
        self.info.mime_type = Some(mime_type.to_owned());
        self
    }

    /// How long a client may reuse what it read (none: read every time).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Suggest values for `variable` (`completion/complete`): `suggest` gets what the user
    /// typed so far and the variables already chosen, and returns values, best first.
    pub fn complete(
        mut self,
        variable: &str,
        suggest: impl Fn(&str, &BTreeMap<String, String>) -> Vec<String> + 'static,
    ) -> Self {
        self.completers.push((variable.to_owned(), Box::new(suggest)));
        self
    }
}

/// The arguments a prompt was given, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptArguments(BTreeMap<String, String>);

impl PromptArguments {
    /// The value of `name`, if given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The value of `name`, or an error naming it (the host already refuses a call without
    /// a required argument: this is for arguments the prompt needs in some cases only).
    pub fn required(&self, name: &str) -> Result<&str, ToolError> {
        self.get(name).ok_or_else(|| ToolError::new(format!("missing argument {name:?}")))
    }
}

/// Who speaks a prompt message.
pub use wit_prompts::Role;

/// One message of a rendered prompt.
#[derive(Debug, Clone)]
pub struct PromptMessage {
    pub role: Role,
    pub content: Content,
}

impl PromptMessage {
    /// A message from the user.
    pub fn user(content: Content) -> Self {
        Self { role: Role::User, content }
    }

    /// A message from the assistant.
    pub fn assistant(content: Content) -> Self {
        Self { role: Role::Assistant, content }
    }

    /// A text message from the user.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self::user(Content::Text(text.into()))
    }
}

type Renderer = Box<dyn Fn(&PromptArguments, &Round) -> Result<Reply<Vec<PromptMessage>>, ToolError>>;

/// A prompt a user picks: its arguments, and how it renders into messages.
pub struct Prompt {
    info: wit_prompts::PromptInfo,
    render: Renderer,
    completers: Vec<(String, Completer)>,
}

impl Prompt {
    /// The prompt `name` (unique across the server; `A-Z a-z 0-9 _ - .`), described by
    /// `description`, rendered by `render`. An `Err` is shown to the client as an
    /// invalid-arguments error.
    pub fn new(
        name: &str,
        description: &str,
        render: impl Fn(&PromptArguments) -> Result<Vec<PromptMessage>, ToolError> + 'static,
    ) -> Self {
        Self::asking(name, description, move |arguments: &PromptArguments, _: &Round| {
            render(arguments).map(Reply::Done)
        })
    }

    /// A prompt that may ask the client for input before it renders (see
    /// [`crate::input`]): `render` also gets the request's [`Round`].
    pub fn asking(
        name: &str,
        description: &str,
        render: impl Fn(&PromptArguments, &Round) -> Result<Reply<Vec<PromptMessage>>, ToolError> + 'static,
    ) -> Self {
        Self {
            info: wit_prompts::PromptInfo {
                name: name.to_owned(),
                title: None,
                description: Some(description.to_owned()).filter(|text| !text.is_empty()),
                arguments: Vec::new(),
            },
            render: Box::new(render),
            completers: Vec::new(),
        }
    }

    /// Declare an argument; the host refuses a get without a `required` one.
    pub fn argument(mut self, name: &str, description: &str, required: bool) -> Self {
        self.info.arguments.push(wit_prompts::PromptArgument {
            name: name.to_owned(),
            title: None,
            description: Some(description.to_owned()).filter(|text| !text.is_empty()),
            required,
        });
        self
    }

    /// A display name.
    pub fn title(mut self, title: &str) -> Self {
        self.info.title = Some(title.to_owned());
        self
    }

    /// Suggest values for `argument` (`completion/complete`): `suggest` gets what the user
    /// typed so far and the arguments already chosen, and returns values, best first.
    pub fn complete(
        mut self,
        argument: &str,
        suggest: impl Fn(&str, &BTreeMap<String, String>) -> Vec<String> + 'static,
    ) -> Self {
        self.completers.push((argument.to_owned(), Box::new(suggest)));
        self
    }

    /// The prompt's name.
    pub fn name(&self) -> &str {
        &self.info.name
    }
}

/// The glue behind [`crate::export_plugin!`] for resources, prompts and completions.
#[doc(hidden)]
pub mod glue {
    use super::*;
    use crate::Plugin;

    pub fn list_resources<P: Plugin>() -> wit_resources::Catalog {
        crate::__private::install_panic_hook();
        wit_resources::Catalog {
            resources: P::resources().into_iter().map(|resource| resource.info).collect(),
            templates: P::resource_templates().into_iter().map(|template| template.info).collect(),
        }
    }

    pub fn read<P: Plugin>(uri: &str) -> Result<wit_resources::ReadResult, wit_resources::ReadError> {
        crate::__private::install_panic_hook();
        let (read, mime_type, ttl) =
            match P::resources().into_iter().find(|resource| resource.info.uri == uri) {
                Some(resource) => ((resource.read)(), resource.info.mime_type, resource.ttl),
                None => {
                    let found = P::resource_templates().into_iter().find_map(|template| {
                        let parsed = cordon_rules::UriTemplate::parse(&template.info.uri_template).ok()?;
                        let variables = parsed.match_uri(uri)?;
                        Some((template, Found { uri: uri.to_owned(), variables }))
                    });
                    let Some((template, found)) = found else {
                        return Err(wit_resources::ReadError::NotFound);
                    };
                    ((template.read)(&found), template.info.mime_type, template.ttl)
                }
            };
        let body = match read {
            Ok(ResourceBody::Text(text)) => wit_resources::Body::Text(text),
            Ok(ResourceBody::Blob(bytes)) => wit_resources::Body::Blob(bytes),
            Err(ResourceError::NotFound) => return Err(wit_resources::ReadError::NotFound),
            Err(ResourceError::Failed(message)) => return Err(wit_resources::ReadError::Failed(message)),
        };
        Ok(wit_resources::ReadResult {
            contents: vec![wit_resources::Contents { uri: uri.to_owned(), mime_type, body }],
            ttl_ms: ttl.map(|ttl| ttl.as_millis() as u64),
        })
    }

    pub fn list_prompts<P: Plugin>() -> Vec<wit_prompts::PromptInfo> {
        crate::__private::install_panic_hook();
        P::prompts().into_iter().map(|prompt| prompt.info).collect()
    }

    pub fn get_prompt<P: Plugin>(
        name: &str,
        arguments: Vec<(String, String)>,
        round: crate::bindings::cordon::tool::input::InputRound,
    ) -> Result<wit_prompts::PromptReply, String> {
        crate::__private::install_panic_hook();
        let prompt = P::prompts()
            .into_iter()
            .find(|prompt| prompt.info.name == name)
            .ok_or_else(|| format!("unknown prompt: {name}"))?;
        let reply =
            (prompt.render)(&PromptArguments(arguments.into_iter().collect()), &Round::from_wit(round))
                .map_err(|error| error.message().to_owned())?;
        Ok(match reply {
            Reply::Done(messages) => wit_prompts::PromptReply::Done(wit_prompts::PromptResult {
                description: None,
                messages: messages
                    .into_iter()
                    .map(|message| wit_prompts::PromptMessage {
                        role: message.role,
                        content: message.content,
                    })
                    .collect(),
            }),
            Reply::Ask(ask) => wit_prompts::PromptReply::NeedsInput(ask.into_wit()),
        })
    }

    pub fn complete<P: Plugin>(
        reference: wit_completions::Reference,
        argument: &str,
        value: &str,
        context: Vec<(String, String)>,
    ) -> Result<wit_completions::Completion, String> {
        crate::__private::install_panic_hook();
        let context: BTreeMap<String, String> = context.into_iter().collect();
        let completers = match reference {
            wit_completions::Reference::Prompt(name) => P::prompts()
                .into_iter()
                .find(|prompt| prompt.info.name == name)
                .map(|prompt| prompt.completers)
                .unwrap_or_default(),
            wit_completions::Reference::ResourceTemplate(uri_template) => P::resource_templates()
                .into_iter()
                .find(|template| template.info.uri_template == uri_template)
                .map(|template| template.completers)
                .unwrap_or_default(),
        };
        let values = completers
            .iter()
            .find(|(name, _)| name == argument)
            .map(|(_, suggest)| suggest(value, &context))
            .unwrap_or_default();
        let total = values.len() as u32;
        Ok(wit_completions::Completion { values, total: Some(total), has_more: false })
    }
}
