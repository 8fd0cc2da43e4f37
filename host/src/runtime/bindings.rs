//! Host bindings for the `cordon:tool/plugin` world (`wit/cordon.wit`).
//!
//! Imports are synchronous (each is a few loads and stores) and trappable (a note over its
//! cap traps). Exports are called async so that a call can be dropped mid-flight.

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
