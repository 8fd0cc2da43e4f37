//! Host bindings for both versions of the `cordon:tool/plugin` world: 0.1.0
//! (`wit/cordon.wit`: tools) and 0.2.0 (`wit/v0.2.0/cordon.wit`: tools, resources,
//! prompts, completions).
//!
//! Imports are synchronous (each is a few loads and stores) and trappable (a note over its
//! cap traps). Exports are called async so that a call can be dropped mid-flight. The
//! `types` interface is the same in both versions, so 0.2.0 reuses 0.1.0's Rust types
//! (`with`): a tool call, its result and its cleanup are one code path for both (0.2.0's
//! `call` also takes a round of input and may answer `needs-input`).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    imports: { default: trappable },
    exports: { default: async },
    additional_derives: [PartialEq],
});

pub use self::cordon::tool::types::{
    CallResult, CleanupContext, Content, EmbeddedResource, Media, ResourceLink, StopReason, ToolAnnotations,
    ToolInfo,
};

/// The 0.2.0 world: `Plugin` and `PluginPre` of its own; the tool types of 0.1.0.
pub mod v2 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2.0",
        world: "plugin",
        imports: { default: trappable },
        exports: { default: async },
        additional_derives: [PartialEq],
        with: { "cordon:tool/types@0.2.0": super::cordon::tool::types },
    });

    pub use self::cordon::tool::input::{
        ClientAbilities, Elicitation, InputRequest, InputRequired, InputRound as WitInputRound,
    };
    pub use self::exports::cordon::tool::completions::{Completion, Reference};
    pub use self::exports::cordon::tool::prompts::PromptReply;
    pub use self::exports::cordon::tool::prompts::{
        PromptArgument, PromptInfo, PromptMessage, PromptResult, Role,
    };
    pub use self::exports::cordon::tool::resources::{
        Body, Catalog, Contents, ReadError, ReadResult, ResourceInfo, ResourceTemplate,
    };
    pub use self::exports::cordon::tool::tool::CallReply;
}
