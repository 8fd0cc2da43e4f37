//! # The tool set: what a request may call, one consistent snapshot
//!
//! The runtime holds its loaded components as one [`ToolSet`] behind an atomically swapped
//! `Arc` (a `watch` channel's value, so that the layers above can also wait for a swap). A
//! request takes the snapshot once and uses it to the end: a reload never changes a call
//! midway, and a call in flight keeps the components it started with alive, whatever the
//! set holds by then. The engine, pool, epoch ticker, compile cache and descriptor budget
//! are the runtime's and outlive every set.
//!
//! A reload ([`super::Runtime::reload`]) builds the next set beside the current one: a
//! component with the same bytes and options is carried over as it is (no compile, its
//! data directory and mounts still open); one that fails to load keeps its old version;
//! the swap happens once, when everything is ready, and only if something changed.
//!
//! Tenants (per-tenant views) belong here too: a view is a filter over one set, taken
//! with it, so that a tenant's list and calls come from the same snapshot.

use std::collections::HashMap;
use std::sync::Arc;

use super::component::{LoadError, LoadedComponent, ToolSpec};
use super::limits::ToolLimits;

/// The loaded components and their tools, as one immutable snapshot.
#[derive(Default)]
pub struct ToolSet {
    pub(crate) components: Vec<Arc<LoadedComponent>>,
    /// Tool name → index into `components`.
    tools: HashMap<String, usize>,
    /// Counts the swaps: two snapshots of one generation are the same set.
    generation: u64,
}

impl ToolSet {
    /// A set of these components, refused when two offer a tool of the same name.
    pub(crate) fn new(components: Vec<Arc<LoadedComponent>>, generation: u64) -> Result<Self, LoadError> {
        let mut set = Self { components: Vec::new(), tools: HashMap::new(), generation };
        for component in components {
            set.push(component)?;
        }
        Ok(set)
    }

    /// The same set, as made by swap number `generation`.
    pub(crate) fn with_generation(self, generation: u64) -> Self {
        Self { generation, ..self }
    }

    /// Add `component`, unless one of its tools is another component's.
    pub(crate) fn push(&mut self, component: Arc<LoadedComponent>) -> Result<(), LoadError> {
        if let Some(clash) = self.clash(&component.name, &component) {
            return Err(clash);
        }
        let index = self.components.len();
        for tool in &component.tools {
            self.tools.insert(tool.name.clone(), index);
        }
        self.components.push(component);
        Ok(())
    }

    /// Why `component` (loaded from `origin`) cannot join this set: a tool of its is
    /// already offered.
    pub(crate) fn clash(&self, origin: &str, component: &LoadedComponent) -> Option<LoadError> {
        component.tools.iter().find_map(|tool| {
            let other = &self.components[*self.tools.get(&tool.name)?].name;
            Some(LoadError::new(origin, format!("tool {:?} is also offered by component {other}", tool.name)))
        })
    }

    /// Every tool, in load order (component by component, each in its own order).
    pub fn tools(&self) -> impl Iterator<Item = &ToolSpec> {
        self.components.iter().flat_map(|component| component.tools.iter())
    }

    /// The tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.component_of(name)?.tools.iter().find(|tool| tool.name == name)
    }

    /// The limits that apply to the tool called `name`.
    pub fn limits(&self, name: &str) -> Option<&ToolLimits> {
        Some(self.component_of(name)?.options.limits_for(name))
    }

    /// The names of the components, in load order.
    pub fn component_names(&self) -> impl Iterator<Item = &str> {
        self.components.iter().map(|component| &*component.name)
    }

    /// Which swap made this set (0: the set the runtime started with).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub(crate) fn component_of(&self, tool: &str) -> Option<&Arc<LoadedComponent>> {
        Some(&self.components[*self.tools.get(tool)?])
    }

    pub(crate) fn component(&self, name: &str) -> Option<&Arc<LoadedComponent>> {
        self.components.iter().find(|component| &*component.name == name)
    }
}

/// What a reload did.
#[derive(Debug, Default)]
pub struct ReloadReport {
    /// Components carried over as they were (same bytes, same options).
    pub unchanged: Vec<String>,
    /// Components compiled and loaded anew (new ones and changed ones).
    pub loaded: Vec<String>,
    /// Components no longer in the set.
    pub removed: Vec<String>,
    /// Components that failed to load: each kept its old version, if it had one.
    pub failed: Vec<LoadError>,
    /// Whether the set was swapped (false when nothing changed).
    pub swapped: bool,
}
