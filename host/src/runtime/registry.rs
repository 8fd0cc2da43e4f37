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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use cordon_rules::Overlap;

use super::component::{LoadError, LoadedComponent, ToolSpec};
use super::limits::ToolLimits;

/// The most steps one component's resources and templates may take to compare with the
/// other components' ([`ToolSet::overlap_clash`]): about 0.1 s. Real sets take thousands.
pub const OVERLAP_BUDGET: u64 = 20_000_000;

/// The most resources and templates a swap matches one stream's subscriptions against
/// ([`ToolSet::owners_changed`]), counted once per subscription.
pub const OWNER_MATCH_BUDGET: usize = 1 << 16;

/// Whether `template` matches `uri`, the work charged to `budget` (about a step per byte);
/// `None` when the budget has too little left.
fn matches_within(template: &super::features::Template, uri: &str, budget: &mut u64) -> Option<bool> {
    *budget = budget.checked_sub(uri.len() as u64 + 1)?;
    Some(template.matches(uri))
}

/// How many `/`-separated segments `uri` has.
fn uri_segments(uri: &str) -> usize {
    uri.matches('/').count() + 1
}

/// The loaded components and their tools, as one immutable snapshot.
///
/// Names are looked up in maps, not by walking the components: a load or a reload checks
/// each new component against the set, and with hundreds of components a walk per check
/// made loading them quadratic (500 small components: 1.2 s of a warm start in a test
/// build, most of it comparing names; BENCHMARKS.md, "Time to ready").
#[derive(Default, Clone)]
pub struct ToolSet {
    pub(crate) components: Vec<Arc<LoadedComponent>>,
    /// Component name → index into `components` (the first of that name).
    by_name: HashMap<Arc<str>, usize>,
    /// Tool name → index into `components`.
    tools: HashMap<String, usize>,
    /// Resource URI, resource template and prompt name → index of the component that
    /// offers it: each is one component's ([`Self::push`] refuses a second).
    resources: HashMap<String, usize>,
    templates: HashMap<String, usize>,
    prompts: HashMap<String, usize>,
    /// Segment count → (component, index in its list) of each template and each resource
    /// URI with that many `/`-separated segments: only those can match one URI together
    /// ([`Self::overlap_clash`]).
    template_shapes: HashMap<usize, Vec<(usize, usize)>>,
    resource_shapes: HashMap<usize, Vec<(usize, usize)>>,
    /// Counts the swaps: two snapshots of one generation are the same set.
    generation: u64,
}

impl ToolSet {
    /// A set of these components, each already checked against those before it
    /// ([`Self::clash`]).
    pub(crate) fn new(components: Vec<Arc<LoadedComponent>>, generation: u64) -> Self {
        let mut set = Self { generation, ..Self::default() };
        for component in components {
            set.push(component);
        }
        set
    }

    /// How long a shutdown waits for calls of this set to stop and be cleaned up: the
    /// longest grace and cleanup budget of any of its tools, and the schema check nothing
    /// interrupts (schema.rs), with a second to spare.
    pub fn drain_budget(&self) -> std::time::Duration {
        let limits = self.components.iter().flat_map(|component| {
            std::iter::once(&component.options.limits).chain(component.options.tool_limits.values())
        });
        let longest = limits.map(|limits| limits.grace + limits.cleanup_budget).max().unwrap_or_default();
        longest.max(super::SCHEMA_CHECK_BUDGET) + std::time::Duration::from_secs(1)
    }

    /// The same set, as made by swap number `generation`.
    pub(crate) fn with_generation(self, generation: u64) -> Self {
        Self { generation, ..self }
    }

    /// Add `component`, already checked against the set ([`Self::clash`]). Not checked
    /// again here: a set that was served is rebuilt (a reload, a relist) from components
    /// checked when each joined, and the overlap check, bounded in steps, could decide
    /// otherwise when it meets them in another order.
    pub(crate) fn push(&mut self, component: Arc<LoadedComponent>) {
        let index = self.components.len();
        self.by_name.entry(component.name.clone()).or_insert(index);
        for tool in &component.tools {
            self.tools.insert(tool.name.clone(), index);
        }
        let offered = &component.offered;
        for (at, resource) in offered.resources.iter().enumerate() {
            self.resources.entry(resource.uri.clone()).or_insert(index);
            self.resource_shapes.entry(uri_segments(&resource.uri)).or_default().push((index, at));
        }
        for (at, template) in offered.templates.iter().enumerate() {
            self.templates.entry(template.info.uri_template.clone()).or_insert(index);
            self.template_shapes.entry(template.segments()).or_default().push((index, at));
        }
        for prompt in &offered.prompts {
            self.prompts.entry(prompt.name.clone()).or_insert(index);
        }
        self.components.push(component);
    }

    /// Why `component` (loaded from `origin`) cannot join this set: a tool of its is
    /// already offered.
    pub(crate) fn clash(&self, origin: &str, component: &LoadedComponent) -> Option<LoadError> {
        let tool = component.tools.iter().find_map(|tool| {
            let other = &self.components[*self.tools.get(&tool.name)?].name;
            Some(LoadError::new(origin, format!("tool {:?} is also offered by component {other}", tool.name)))
        });
        tool.or_else(|| self.feature_clash(origin, component))
    }

    /// Why `component` cannot join: a resource URI, template or prompt name of its is
    /// already another component's (a request must reach exactly one).
    fn feature_clash(&self, origin: &str, component: &LoadedComponent) -> Option<LoadError> {
        // The component offering `key` in `map`, unless that is `component` itself.
        let other = |map: &HashMap<String, usize>, key: &String| {
            Some(&self.components[*map.get(key)?]).filter(|other| other.name != component.name)
        };
        let offered = &component.offered;
        let clash = (offered.resources.iter())
            .find_map(|resource| Some(("resource", &resource.uri, other(&self.resources, &resource.uri)?)))
            .or_else(|| {
                offered.templates.iter().find_map(|template| {
                    let uri_template = &template.info.uri_template;
                    Some(("resource template", uri_template, other(&self.templates, uri_template)?))
                })
            })
            .or_else(|| {
                (offered.prompts.iter())
                    .find_map(|prompt| Some(("prompt", &prompt.name, other(&self.prompts, &prompt.name)?)))
            });
        match clash {
            Some((what, name, other)) => Some(LoadError::new(
                origin,
                format!("{what} {name:?} is also offered by component {}", other.name),
            )),
            None => self.overlap_clash(component).map(|why| LoadError::new(origin, why)),
        }
    }

    /// Why `component` cannot join: one of its templates could match a URI another
    /// component's template or resource list serves, or one of its resources matches
    /// another's template. Reads are routed to one component, so with such an overlap
    /// the first loaded would take reads meant for the other (a component offering
    /// `{s}://{h}/{p}` would take every read): refused at load, as a tool name offered
    /// twice is. Within one component, overlaps are its own business.
    ///
    /// Only URIs and templates of as many segments are compared, and the comparisons are
    /// bounded in all ([`OVERLAP_BUDGET`] steps): a component whose lists take more to
    /// compare is refused rather than let the load (or a relist) take seconds.
    fn overlap_clash(&self, component: &LoadedComponent) -> Option<String> {
        let offered = &component.offered;
        let mut budget = OVERLAP_BUDGET;
        let too_costly = || {
            format!(
                "comparing its resources and resource templates with the other components' took more \
                 than {OVERLAP_BUDGET} steps; list fewer or shorter templates"
            )
        };
        let others = |shapes, segments| self.others_shaped(shapes, segments, &component.name);
        for template in &offered.templates {
            let ours = &template.info.uri_template;
            for (other, at) in others(&self.template_shapes, template.segments()) {
                let theirs = &other.offered.templates[at];
                match template.overlap(theirs, &mut budget) {
                    Overlap::Disjoint => {}
                    Overlap::Common(uri) => {
                        return Some(format!(
                            "resource template {ours:?} overlaps resource template {:?} of component {}: \
                             both match {uri:?}",
                            theirs.info.uri_template, other.name
                        ));
                    }
                    Overlap::Possible => {
                        return Some(format!(
                            "resource template {ours:?} may overlap resource template {:?} of component {}: \
                             their patterns share URIs, and whether both templates match one was not decided",
                            theirs.info.uri_template, other.name
                        ));
                    }
                    Overlap::Undecided => return Some(too_costly()),
                }
            }
            for (other, at) in others(&self.resource_shapes, template.segments()) {
                let uri = &other.offered.resources[at].uri;
                let Some(matched) = matches_within(template, uri, &mut budget) else {
                    return Some(too_costly());
                };
                if matched {
                    return Some(format!(
                        "resource template {ours:?} matches resource {uri:?} of component {}",
                        other.name
                    ));
                }
            }
        }
        for resource in &offered.resources {
            let uri = &resource.uri;
            for (other, at) in others(&self.template_shapes, uri_segments(uri)) {
                let theirs = &other.offered.templates[at];
                let Some(matched) = matches_within(theirs, uri, &mut budget) else {
                    return Some(too_costly());
                };
                if matched {
                    return Some(format!(
                        "resource {uri:?} matches resource template {:?} of component {}",
                        theirs.info.uri_template, other.name
                    ));
                }
            }
        }
        None
    }

    /// The entries of `shapes` with `segments` segments, with their component, except
    /// those of the component called `name`.
    fn others_shaped<'a>(
        &'a self,
        shapes: &'a HashMap<usize, Vec<(usize, usize)>>,
        segments: usize,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a Arc<LoadedComponent>, usize)> {
        let entries = shapes.get(&segments).map(Vec::as_slice).unwrap_or_default();
        entries.iter().filter_map(move |&(index, at)| {
            let other = &self.components[index];
            (*other.name != *name).then_some((other, at))
        })
    }

    /// The components `view` sees, in load order.
    fn visible<'a>(&'a self, view: Option<&TenantView>) -> impl Iterator<Item = &'a Arc<LoadedComponent>> {
        let view = view.cloned();
        self.components.iter().filter(move |component| component.seen_by(view.as_ref()))
    }

    /// Every resource `view` sees, in load order.
    pub fn resources_for<'a>(
        &'a self,
        view: Option<&'a TenantView>,
    ) -> impl Iterator<Item = &'a super::features::ResourceInfo> {
        self.visible(view).flat_map(|component| component.offered.resources.iter())
    }

    /// Every resource template `view` sees, in load order.
    pub fn templates_for<'a>(
        &'a self,
        view: Option<&'a TenantView>,
    ) -> impl Iterator<Item = &'a super::features::ResourceTemplate> {
        self.visible(view)
            .flat_map(|component| component.offered.templates.iter().map(|template| &template.info))
    }

    /// Every prompt `view` sees, in load order.
    pub fn prompts_for<'a>(
        &'a self,
        view: Option<&'a TenantView>,
    ) -> impl Iterator<Item = &'a super::features::PromptInfo> {
        self.visible(view).flat_map(|component| component.offered.prompts.iter())
    }

    /// What the components `view` sees offer besides tools: (resources or templates,
    /// prompts, completions).
    pub fn features_for(&self, view: Option<&TenantView>) -> (bool, bool, bool) {
        self.visible(view).fold((false, false, false), |(resources, prompts, completions), component| {
            let offered = &component.offered;
            let has_resources = !offered.resources.is_empty() || !offered.templates.is_empty();
            let has_prompts = !offered.prompts.is_empty();
            (
                resources || has_resources,
                prompts || has_prompts,
                completions || (offered.completions && !offered.is_empty()),
            )
        })
    }

    /// The component that serves `uri`: the one listing it, else the one whose template it
    /// matches (one at most: [`Self::overlap_clash`]).
    pub(crate) fn resource_owner(
        &self,
        view: Option<&TenantView>,
        uri: &str,
    ) -> Option<&Arc<LoadedComponent>> {
        self.listed_owner(view, uri)
            .or_else(|| self.visible(view).find(|component| component.offered.serves_uri(uri)))
    }

    /// The component that lists `uri` by name, if `view` sees it.
    fn listed_owner(&self, view: Option<&TenantView>, uri: &str) -> Option<&Arc<LoadedComponent>> {
        self.seen(view, self.resources.get(uri))
    }

    /// Those of `uris` whose serving component ([`Self::resource_owner`]) differs in
    /// `after`, as `view` sees both. Only a component swapped in or out can change which
    /// one serves a URI, so only those are matched, and at most [`OWNER_MATCH_BUDGET`]
    /// resources and templates in all: a guest that relists many templates, and a client
    /// holding many subscriptions on many streams, would otherwise make each swap a
    /// matching of every subscription against every template, on every stream. Past the
    /// budget, a URI no component lists by name in either set is counted as changed (the
    /// client reads it again: no harm).
    pub(crate) fn owners_changed<'u>(
        &self,
        after: &ToolSet,
        view: Option<&TenantView>,
        uris: impl ExactSizeIterator<Item = &'u String>,
    ) -> Vec<&'u String> {
        let pointers = |set: &ToolSet| -> HashSet<*const LoadedComponent> {
            set.visible(view).map(Arc::as_ptr).collect()
        };
        let (were, are) = (pointers(self), pointers(after));
        let swapped: Vec<&Arc<LoadedComponent>> =
            (self.visible(view).filter(|c| !are.contains(&Arc::as_ptr(c))))
                .chain(after.visible(view).filter(|c| !were.contains(&Arc::as_ptr(c))))
                .collect();
        if swapped.is_empty() {
            return Vec::new();
        }
        let per_uri: usize =
            swapped.iter().map(|c| c.offered.resources.len() + c.offered.templates.len()).sum();
        let matched = per_uri.saturating_mul(uris.len()) <= OWNER_MATCH_BUDGET;
        let listed = |set: &ToolSet, uri: &str| set.listed_owner(view, uri).map(Arc::as_ptr);
        uris.filter(|uri| match (listed(self, uri), listed(after, uri)) {
            (Some(was), Some(is)) => was != is,
            (None, None) if matched => swapped.iter().any(|c| c.offered.serves_uri(uri)),
            _ => true,
        })
        .collect()
    }

    /// The component offering the prompt `name`.
    pub(crate) fn prompt_owner(
        &self,
        view: Option<&TenantView>,
        name: &str,
    ) -> Option<&Arc<LoadedComponent>> {
        self.seen(view, self.prompts.get(name))
    }

    /// The component offering the template `uri_template`.
    pub(crate) fn template_owner(
        &self,
        view: Option<&TenantView>,
        uri_template: &str,
    ) -> Option<&Arc<LoadedComponent>> {
        self.seen(view, self.templates.get(uri_template))
    }

    /// The component at `index`, if `view` sees it.
    fn seen(&self, view: Option<&TenantView>, index: Option<&usize>) -> Option<&Arc<LoadedComponent>> {
        Some(&self.components[*index?]).filter(|component| component.seen_by(view))
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

    /// The tool called `name` as `view` sees it: a tool of a component outside the view is
    /// not there at all. `None` sees every tool.
    pub fn tool_for(&self, view: Option<&TenantView>, name: &str) -> Option<&ToolSpec> {
        self.component_for(view, name)?.tools.iter().find(|tool| tool.name == name)
    }

    /// Every tool `view` sees, in load order.
    pub fn tools_for<'a>(&'a self, view: Option<&'a TenantView>) -> impl Iterator<Item = &'a ToolSpec> {
        self.components
            .iter()
            .filter(move |component| component.seen_by(view))
            .flat_map(|component| component.tools.iter())
    }

    pub(crate) fn component_for(
        &self,
        view: Option<&TenantView>,
        tool: &str,
    ) -> Option<&Arc<LoadedComponent>> {
        self.component_of(tool).filter(|component| component.seen_by(view))
    }

    pub(crate) fn component(&self, name: &str) -> Option<&Arc<LoadedComponent>> {
        Some(&self.components[*self.by_name.get(name)?])
    }
}

/// A tenant's view of any tool set: the components it may use (by name, so that it holds
/// across reloads) and its share of the call slots. Built from the config; the runtime
/// knows tenants by name only, never how a request proved it was one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantView {
    pub tenant: Arc<str>,
    pub components: Arc<BTreeSet<String>>,
    /// Calls of this tenant holding a slot at once; more wait in the queue (fairly, see
    /// `fair.rs`).
    pub max_concurrent_calls: Option<usize>,
}

impl LoadedComponent {
    /// Give its grants' quotas its limits: it is served from now on (files.rs).
    pub(crate) fn apply_quota_limits(&self) {
        for files in self.files.iter().chain(self.tenant_files.values()) {
            files.apply_limits();
        }
    }

    /// Whether `view` sees the component: without a view, always; a tenant's, when the
    /// tenant may use it (its view, read at start, names the component, and so does the
    /// config the component was loaded from) and, should it have a data directory, the
    /// tenant has its own there. A component removed by a reload, then loaded again from a
    /// config whose `[[tenants]]` no longer name a tenant, is not that tenant's: the views
    /// served are still those read at start. Its own grants (`files`) hold the whole data
    /// directory, every tenant's in it, so such a tenant must never fall back to them.
    pub(crate) fn seen_by(&self, view: Option<&TenantView>) -> bool {
        view.is_none_or(|view| {
            view.sees(&self.name)
                && self.options.tenants.iter().any(|tenant| **tenant == *view.tenant)
                && (self.options.data_dir.is_none() || self.tenant_files.contains_key(&*view.tenant))
        })
    }
}

impl TenantView {
    pub fn new(
        tenant: &str,
        components: impl IntoIterator<Item = String>,
        max_concurrent_calls: Option<usize>,
    ) -> Self {
        Self {
            tenant: tenant.into(),
            components: Arc::new(components.into_iter().collect()),
            max_concurrent_calls,
        }
    }

    /// Whether the tenant may use the component called `component`.
    pub fn sees(&self, component: &str) -> bool {
        self.components.contains(component)
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
