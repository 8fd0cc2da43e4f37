//! Checking JSON against a tool's schemas (arguments before a call, structured output
//! after it) within a bound.
//!
//! A check is host code: no epoch interrupts it, and a tool's schema is as untrusted as
//! its code. Some schemas cost far more than a walk of the instance: a subschema applied
//! in place beside another (`anyOf`, `allOf`, `not`, `if`, a `$ref` with sibling keywords,
//! ...) evaluates an instance node twice, and nested, that doubles at every level;
//! `uniqueItems` is quadratic; `required` or `properties` with thousands of names multiply
//! every object. So a check runs in place only when it is sure to be cheap: no such
//! keyword, and a small product of schema and instance sizes. (A `$ref` standing alone, as
//! the guest SDK's schemas for nested types have it, only names the schema to use, and so
//! does one beside assertions like `type`.)
//!
//! Any other check runs on a thread of its own, one at a time per component, for at most
//! [`CHECK_BUDGET`], at the lowest priority. A check that runs over cannot be stopped: its
//! thread is abandoned, keeping the component's one permit, and a watchdog (which runs whether
//! or not anyone still waits for the answer) marks the schema so that it refuses every
//! later check. A guest can list a schema anew at will (a relist, another tool, a copy
//! with one word changed), so what bounds the threads is [`CheckThreads`], shared by every
//! schema of a runtime: at most [`MAX_CHECK_THREADS`] run at once, an abandoned one keeps
//! its place for as long as it runs, and a schema that ran over is remembered by its
//! digest, so listing it again does not buy another thread. One component's checks that
//! ran over hold at most [`MAX_ABANDONED_PER_COMPONENT`] of them: its further costly
//! checks are refused, and the other components keep the rest.
//!
//! Compiling is bounded too: a pattern of ten bytes (`[^a]{5000}`) compiles, under the
//! regex crate's default limit, into about 6 MB in about 0.1 s, and a guest lists what it
//! likes whenever it likes. So each pattern is held to [`PATTERN_BYTES`], and a
//! component's schemas to [`MAX_PATTERNS`] (component.rs, `compile_schemas`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use serde_json::Value;
use tokio::sync::{Semaphore, oneshot};

/// The longest a check that is not sure to be cheap may run.
pub const CHECK_BUDGET: Duration = Duration::from_secs(5);

/// Keywords whose work is not bounded by one walk of the instance: in-place applicators, a
/// second applicator to the same children (`patternProperties`, `contains`), and the
/// quadratic or pattern-matching ones. (`$ref` is judged by its siblings: see
/// [`has_costly_keyword`].)
const COSTLY_KEYWORDS: [&str; 15] = [
    "$dynamicRef",
    "$recursiveRef",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "dependentSchemas",
    "dependencies",
    "patternProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "uniqueItems",
    "pattern",
];

/// Applicators to children that are not costly alone, but are beside a `$ref`: the
/// referenced schema may apply its own to the same children.
const CHILD_APPLICATORS: [&str; 5] =
    ["properties", "additionalProperties", "items", "prefixItems", "additionalItems"];

/// The most schema nodes × instance nodes a check in place may take on.
const IN_PLACE_WORK: usize = 1 << 20;

/// The most host memory one compiled `pattern` (or `patternProperties` name) may take: a
/// tenth of the regex crate's default. A guest lists its schemas at will (a relist), so
/// what its patterns hold is bounded twice: by this, and by [`MAX_PATTERNS`] for all of a
/// component's schemas.
pub const PATTERN_BYTES: usize = 1 << 20;

/// The most one pattern's lazy DFA may cache, in each thread that matches with it (a
/// check thread, or a thread that checks in place): an eighth of the regex crate's
/// default.
pub const PATTERN_CACHE_BYTES: usize = 256 << 10;

/// The most patterns (`pattern` values and `patternProperties` names) all of a component's
/// tool schemas may hold together: with [`PATTERN_BYTES`], at most 128 MiB of compiled
/// patterns (and 32 MiB of caches per thread that checks), where ten thousand of them,
/// each near the regex crate's default limit, would take the host's memory.
pub const MAX_PATTERNS: usize = 128;

/// The most checks that run on threads of their own at once, in a runtime (abandoned ones
/// included: once this many ran over, no costly check runs until one of them ends).
pub const MAX_CHECK_THREADS: usize = 4;

/// The most checks of one component that may run over and keep their threads: one. A
/// guest lists what schemas it likes, so without a share of its own one component's
/// schemas could take every thread for good and leave no costly check to any other
/// component, or tenant.
pub const MAX_ABANDONED_PER_COMPONENT: usize = 1;

/// The threads a runtime's costly checks run on, and the schemas that ran over; as one
/// component sees them ([`CheckThreads::for_component`]), with its own count of checks that
/// ran over too.
pub(crate) struct CheckThreads {
    threads: Arc<tokio::sync::Semaphore>,
    /// Checks that ran past their budget and whose threads still run.
    abandoned: Abandoned,
    /// The digests of the schemas whose check ran past its budget, each with how many such
    /// checks still run: one component's ending must not unmark another's.
    overran: Arc<Mutex<HashMap<[u8; 32], usize>>>,
    /// Each component's share, by its name: kept across its reloads and relists, which
    /// list new schemas but are the same guest.
    components: Arc<Mutex<HashMap<String, ComponentShare>>>,
    /// One costly check of the component at a time: the thread holds the permit until it
    /// ends, so a check that never ends holds it for good, and a component's checks that
    /// run over can never hold more than one thread, however many run at once.
    checker: Arc<Semaphore>,
}

/// What one component's checks hold of the runtime's: its abandoned checks, and its one
/// permit to run a check off the caller's thread.
#[derive(Clone)]
struct ComponentShare {
    abandoned: Arc<AtomicUsize>,
    checker: Arc<Semaphore>,
}

impl Default for ComponentShare {
    fn default() -> Self {
        Self { abandoned: Arc::default(), checker: Arc::new(Semaphore::new(1)) }
    }
}

impl Default for CheckThreads {
    fn default() -> Self {
        Self {
            threads: Arc::new(tokio::sync::Semaphore::new(MAX_CHECK_THREADS)),
            abandoned: Abandoned::default(),
            overran: Arc::default(),
            components: Arc::default(),
            checker: Arc::new(Semaphore::new(1)),
        }
    }
}

/// Checks that ran over and whose threads still run: the runtime's, and one component's.
#[derive(Clone, Default)]
struct Abandoned {
    runtime: Arc<AtomicUsize>,
    component: Arc<AtomicUsize>,
}

impl Abandoned {
    fn add(&self) {
        self.runtime.fetch_add(1, Ordering::AcqRel);
        self.component.fetch_add(1, Ordering::AcqRel);
    }

    fn take_back(&self) {
        self.runtime.fetch_sub(1, Ordering::AcqRel);
        self.component.fetch_sub(1, Ordering::AcqRel);
    }
}

impl CheckThreads {
    /// The same threads, as the component `name` sees them: its checks that run over are
    /// counted against its own share ([`MAX_ABANDONED_PER_COMPONENT`]) too.
    pub(crate) fn for_component(&self, name: &str) -> Arc<Self> {
        let mut components = self.components.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let share = components.entry(name.to_owned()).or_default().clone();
        Arc::new(Self {
            threads: self.threads.clone(),
            abandoned: Abandoned { runtime: self.abandoned.runtime.clone(), component: share.abandoned },
            overran: self.overran.clone(),
            components: self.components.clone(),
            checker: share.checker,
        })
    }

    fn ran_over(&self, digest: &[u8; 32]) -> bool {
        self.overran.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains_key(digest)
    }

    fn remember_overrun(&self, digest: [u8; 32]) {
        *self.overran.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(digest).or_default() +=
            1;
    }

    /// One check of the schema that ran over has ended: unmarked once none still runs
    /// (then true).
    fn forget_overrun(&self, digest: &[u8; 32]) -> bool {
        let mut overran = self.overran.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(running) = overran.get_mut(digest) else { return true };
        *running -= 1;
        let ended = *running == 0;
        if ended {
            overran.remove(digest);
        }
        ended
    }

    /// Checker threads abandoned and still running, in the runtime.
    #[cfg(test)]
    pub(crate) fn abandoned(&self) -> usize {
        self.abandoned.runtime.load(Ordering::Relaxed)
    }
}

/// Where a checker thread is: running, finished, or abandoned by its watchdog (whichever
/// comes first wins; an abandoned thread that finishes after all gives its place back).
const RUNNING: u8 = 0;
const FINISHED: u8 = 1;
const ABANDONED: u8 = 2;

/// A compiled schema, and what a check against it may cost.
pub(crate) struct Schema {
    validator: Arc<jsonschema::Validator>,
    /// JSON values in the schema: the work per instance node is at most about this.
    nodes: usize,
    /// Whether the schema has one of [`COSTLY_KEYWORDS`] (anywhere: a false alarm only
    /// moves a check off this thread).
    costly: bool,
    /// The component's one permit to check off the caller's thread ([`CheckThreads`]).
    checker: Arc<Semaphore>,
    /// Set once a check ran past its budget, until its abandoned thread ends: a schema whose
    /// check never ends is refused for good, but one that a client's large instance ran
    /// over (a costly schema is costly per item) is checked again once that check is done,
    /// rather than left uncallable for every tenant until a restart.
    overran: Arc<AtomicBool>,
    /// The SHA-256 of the schema's JSON text: how [`CheckThreads`] knows it again.
    digest: [u8; 32],
    threads: Arc<CheckThreads>,
}

/// What a check found.
#[derive(Debug, PartialEq)]
pub(crate) enum Check {
    Valid,
    /// Every way the instance breaks the schema (the first five), as one line for a client.
    Invalid(String),
    /// No answer: why (the check ran past its budget, now or an earlier time, or could not
    /// start), as a clause for a client.
    Unchecked(String),
}

impl Schema {
    /// Compile `schema` (JSON Schema 2020-12 unless `$schema` says otherwise; references to
    /// the network are never fetched).
    pub(crate) fn compile(schema: &Value, threads: &Arc<CheckThreads>) -> Result<Self, String> {
        let patterns = jsonschema::PatternOptions::fancy_regex()
            .size_limit(PATTERN_BYTES)
            .dfa_size_limit(PATTERN_CACHE_BYTES);
        let validator = jsonschema::options()
            .with_pattern_options(patterns)
            .build(schema)
            .map_err(|error| error.to_string())?;
        let digest: [u8; 32] = Sha256::digest(serde_json::to_vec(schema).unwrap_or_default()).into();
        Ok(Self {
            validator: Arc::new(validator),
            nodes: node_count(schema),
            costly: has_costly_keyword(schema),
            checker: threads.checker.clone(),
            overran: Arc::new(AtomicBool::new(threads.ran_over(&digest))),
            digest,
            threads: threads.clone(),
        })
    }

    /// Check `instance`: in place when that is sure to be cheap (then this resolves in its
    /// first poll), else on a thread of its own within [`CHECK_BUDGET`].
    pub(crate) async fn check(&self, instance: &Value) -> Check {
        self.check_within(instance, CHECK_BUDGET).await
    }

    async fn check_within(&self, instance: &Value, budget: Duration) -> Check {
        let overran = || Check::Unchecked(format!("a check ran past {budget:?}: the schema is too costly"));
        if self.overran.load(Ordering::Relaxed) {
            // Another compile of the schema (a reload's) may have seen its check end.
            if self.threads.ran_over(&self.digest) {
                return overran();
            }
            self.overran.store(false, Ordering::Relaxed);
        }
        if !self.costly && self.nodes.saturating_mul(node_count(instance)) <= IN_PLACE_WORK {
            return check(&self.validator, instance);
        }
        let threads = &self.threads;
        if threads.abandoned.component.load(Ordering::Relaxed) >= MAX_ABANDONED_PER_COMPONENT {
            return Check::Unchecked(
                "a costly check of this component ran over and its thread still runs: the component's \
                 costly checks are refused while it does"
                    .into(),
            );
        }
        if threads.abandoned.runtime.load(Ordering::Relaxed) >= MAX_CHECK_THREADS {
            return Check::Unchecked("every thread for costly checks is held by checks that ran over".into());
        }
        // Waiting for a thread is bounded apart from the check's own budget, and running
        // out of it marks nothing: a schema is judged by its own checks, not by how busy
        // the other schemas kept the threads.
        let permits = async {
            let schema_permit = self.checker.clone().acquire_owned().await?;
            let thread_permit = threads.threads.clone().acquire_owned().await?;
            Ok::<_, tokio::sync::AcquireError>((schema_permit, thread_permit))
        };
        let Ok(Ok(permits)) = tokio::time::timeout(budget, permits).await else {
            return Check::Unchecked(format!("other costly checks took all of {budget:?}"));
        };
        let deadline = tokio::time::Instant::now() + budget;
        if self.overran.load(Ordering::Relaxed) {
            return overran();
        }
        let (answer, answered) = oneshot::channel();
        let (validator, owned) = (self.validator.clone(), instance.clone());
        let state = Arc::new(AtomicU8::new(RUNNING));
        let (thread_state, thread_threads, thread_flag, digest) =
            (state.clone(), threads.clone(), self.overran.clone(), self.digest);
        let spawned = std::thread::Builder::new().name("cordon-schema".into()).spawn(move || {
            // Behind every thread that serves calls, should it never end.
            super::engine::lower_thread_priority();
            let check = check(&validator, &owned);
            if thread_state.compare_exchange(RUNNING, FINISHED, Ordering::AcqRel, Ordering::Acquire).is_err()
            {
                // Abandoned, and ended after all: the schema is checked again.
                if thread_threads.forget_overrun(&digest) {
                    thread_flag.store(false, Ordering::Relaxed);
                }
                thread_threads.abandoned.take_back();
            }
            drop(permits);
            let _ = answer.send(check);
        });
        if let Err(error) = spawned {
            return Check::Unchecked(format!("no thread to check it on ({error})"));
        }
        let (forward, forwarded) = oneshot::channel();
        let (flag, digest, threads) = (self.overran.clone(), self.digest, threads.clone());
        tokio::spawn(async move {
            match tokio::time::timeout_at(deadline, answered).await {
                Ok(Ok(check)) => drop(forward.send(check)),
                Ok(Err(_panicked)) => drop(forward.send(Check::Unchecked("the check failed".into()))),
                Err(_elapsed) => {
                    flag.store(true, Ordering::Relaxed);
                    threads.remember_overrun(digest);
                    // Counted before it is marked, so that a thread finishing in between
                    // (which then takes one off) never takes the count below zero.
                    threads.abandoned.add();
                    if state
                        .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        // It finished just now, after all: nothing is left to unmark it.
                        if threads.forget_overrun(&digest) {
                            flag.store(false, Ordering::Relaxed);
                        }
                        threads.abandoned.take_back();
                    }
                    tracing::warn!(
                        "a schema check ran past {budget:?}: its thread is abandoned, and the schema refuses every check until it ends"
                    );
                }
            }
        });
        forwarded.await.unwrap_or_else(|_| overran())
    }
}

fn check(validator: &jsonschema::Validator, instance: &Value) -> Check {
    // `is_valid` stops at the first failure; the errors are collected only for an answer.
    if validator.is_valid(instance) {
        return Check::Valid;
    }
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .take(5)
        .map(|error| {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() { "(root)".to_owned() } else { path };
            format!("{at}: {error}")
        })
        .collect();
    Check::Invalid(errors.join("; "))
}

/// The JSON values in `value`, itself included.
fn node_count(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(node_count).sum::<usize>(),
        Value::Object(fields) => 1 + fields.values().map(node_count).sum::<usize>(),
        _ => 1,
    }
}

/// Whether any object in `value` has one of [`COSTLY_KEYWORDS`], a `$ref` beside one of
/// [`CHILD_APPLICATORS`], or `format: regex` (asserted by default in drafts 4 to 7, it
/// compiles every string it checks as a pattern). (Objects that are not schemas, such as
/// `properties` maps or `const` values, are judged too: a false alarm only moves a check
/// off the caller's thread.)
fn has_costly_keyword(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(has_costly_keyword),
        Value::Object(fields) => {
            let applied_beside_ref = fields.contains_key("$ref")
                && CHILD_APPLICATORS.iter().any(|applicator| fields.contains_key(*applicator));
            applied_beside_ref
                || fields.get("format").is_some_and(|format| format == "regex")
                || fields
                    .iter()
                    .any(|(key, value)| COSTLY_KEYWORDS.contains(&key.as_str()) || has_costly_keyword(value))
        }
        _ => false,
    }
}

/// The patterns `value` holds: each string `pattern` and each name of a
/// `patternProperties` object, wherever they are (a false alarm in a `const` only counts
/// against [`MAX_PATTERNS`]).
pub(crate) fn pattern_count(value: &Value) -> usize {
    match value {
        Value::Array(items) => items.iter().map(pattern_count).sum(),
        Value::Object(fields) => fields
            .iter()
            .map(|(key, value)| {
                let own = match (key.as_str(), value) {
                    ("pattern", Value::String(_)) => 1,
                    ("patternProperties", Value::Object(names)) => names.len(),
                    _ => 0,
                };
                own + pattern_count(value)
            })
            .sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `anyOf` of two `$ref`s to the next level, `depth` levels deep: a check of anything
    /// that is not a string takes 2^depth steps.
    fn doubling(depth: usize) -> Value {
        let mut defs = serde_json::Map::new();
        for level in 0..depth {
            let next = json!({"$ref": format!("#/$defs/d{}", level + 1)});
            defs.insert(format!("d{level}"), json!({"anyOf": [next, next]}));
        }
        defs.insert(format!("d{depth}"), json!({"type": "string"}));
        json!({"type": "object", "$defs": defs, "properties": {"a": {"$ref": "#/$defs/d0"}}})
    }

    #[test]
    fn a_pattern_is_compiled_within_its_bound_and_everyday_ones_fit() {
        let threads = Arc::default();
        for everyday in
            [r"^[a-zA-Z0-9._-]{1,64}$", r"^\w+@\w+\.\w+$", r"^\d{4}-\d{2}-\d{2}$", r"^[\w .-]{1,32}$"]
        {
            let schema = json!({ "type": "string", "pattern": everyday });
            assert!(Schema::compile(&schema, &threads).is_ok(), "{everyday}");
        }
        // Ten bytes that the regex crate's default limit (10 MiB) compiles, into about 6 MB
        // in 95 ms (measured, 2026-12-05).
        let costly = json!({ "type": "string", "pattern": "[^a]{5000}" });
        let refused = Schema::compile(&costly, &threads).err().expect("compiled");
        assert!(refused.contains("pattern") || refused.contains("regex"), "{refused}");
    }

    #[test]
    fn format_regex_and_patterns_are_found_wherever_they_are() {
        assert!(has_costly_keyword(&json!({ "items": { "format": "regex" } })));
        assert!(!has_costly_keyword(&json!({ "items": { "format": "email" } })));
        let schema = json!({
            "properties": { "a": { "pattern": "^a" }, "pattern": { "type": "string" } },
            "patternProperties": { "^x": {}, "^y": { "pattern": "z" } }
        });
        assert_eq!(pattern_count(&schema), 4);
    }

    #[tokio::test]
    async fn a_cheap_check_runs_in_place_and_reports_every_problem() {
        let schema = Schema::compile(
            &json!({"type": "object", "properties": {"a": {"type": "string"}}}),
            &Arc::default(),
        )
        .unwrap();
        assert!(!schema.costly);
        assert_eq!(schema.check(&json!({"a": "x"})).await, Check::Valid);
        let Check::Invalid(problems) = schema.check(&json!({"a": 1})).await else { panic!() };
        assert!(problems.starts_with("/a: 1 is not of type \"string\""), "{problems}");
    }

    #[tokio::test]
    async fn a_costly_check_is_answered_in_time() {
        let schema = Schema::compile(&doubling(8), &Arc::default()).unwrap();
        assert!(schema.costly);
        assert_eq!(schema.check(&json!({"a": "x"})).await, Check::Valid);
        assert!(matches!(schema.check(&json!({"a": 1})).await, Check::Invalid(_)));
    }

    fn is_unchecked(check: &Check) -> bool {
        matches!(check, Check::Unchecked(reason) if reason.contains("too costly"))
    }

    #[tokio::test]
    async fn a_check_that_runs_over_is_abandoned_and_the_schema_refuses_further_checks() {
        // 2^60 steps: this check would never end.
        let schema = Schema::compile(&doubling(60), &Arc::default()).unwrap();
        let budget = Duration::from_millis(50);
        let started = std::time::Instant::now();
        assert!(is_unchecked(&schema.check_within(&json!({"a": 1}), budget).await));
        assert!(started.elapsed() < Duration::from_secs(2), "answered at its budget");
        assert!(is_unchecked(&schema.check(&json!({"a": "x"})).await), "refused at once");
    }

    /// A schema costly per item, run over by one large instance (a client's): refused
    /// while that check runs on, checked again once it ends. Before, the schema was
    /// refused for good, so one client's request left a tool uncallable for every tenant.
    #[tokio::test]
    async fn a_check_that_ran_over_and_ended_after_all_lets_the_schema_be_checked_again() {
        let threads = Arc::new(CheckThreads::default());
        let per_item = doubling(8);
        let schema =
            json!({"type": "array", "items": per_item["properties"]["a"], "$defs": per_item["$defs"]});
        let compiled = Schema::compile(&schema, &threads).unwrap();
        // About a million steps: past a budget of nothing, done within seconds.
        let large = Value::Array(vec![json!(1); 4_000]);
        assert!(is_unchecked(&compiled.check_within(&large, Duration::ZERO).await));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while threads.abandoned() > 0 {
            assert!(std::time::Instant::now() < deadline, "the abandoned check never ended");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(compiled.check(&json!(["x"])).await, Check::Valid);
        // A reload compiles it again: checked too.
        assert_eq!(Schema::compile(&schema, &threads).unwrap().check(&json!(["x"])).await, Check::Valid);
    }

    #[tokio::test]
    async fn a_caller_that_stops_waiting_still_leaves_the_schema_marked() {
        let schema = Schema::compile(&doubling(60), &Arc::default()).unwrap();
        let budget = Duration::from_millis(50);
        let instance = json!({"a": 1});
        let abandoned =
            tokio::time::timeout(Duration::from_millis(5), schema.check_within(&instance, budget));
        assert!(abandoned.await.is_err(), "the caller gave up first (a cancelled call)");
        tokio::time::sleep(budget * 2).await;
        // Without the watchdog, this check would start a second endless thread.
        assert!(is_unchecked(&schema.check(&json!({"a": 2})).await));
    }

    /// A guest can list the same costly schema again, or copies with a word changed, at
    /// will: the runtime's checker threads stay bounded, and a schema that ran over is
    /// refused at once however often it is compiled again.
    #[tokio::test]
    async fn checks_that_run_over_hold_a_bounded_number_of_threads_whatever_is_listed() {
        let runtime = CheckThreads::default();
        let threads = runtime.for_component("first");
        let budget = Duration::from_millis(30);
        let same = Schema::compile(&doubling(60), &threads).unwrap();
        assert!(is_unchecked(&same.check_within(&json!({"a": 1}), budget).await));
        assert_eq!(threads.abandoned(), 1);
        let listed_again = Schema::compile(&doubling(60), &runtime.for_component("second")).unwrap();
        assert!(is_unchecked(&listed_again.check_within(&json!({"a": 1}), budget).await));
        assert_eq!(threads.abandoned(), 1, "the same schema listed again got a thread");
        // One component's copies get no second thread, listed however often, relisted or
        // reloaded (the same name).
        for copy in 0..MAX_CHECK_THREADS * 2 {
            let mut schema = doubling(60);
            schema["title"] = json!(format!("copy {copy}"));
            let schema = Schema::compile(&schema, &runtime.for_component("first")).unwrap();
            let Check::Unchecked(why) = schema.check_within(&json!({"a": 1}), budget).await else {
                panic!("checked")
            };
            assert!(why.contains("this component"), "{why}");
        }
        assert_eq!(threads.abandoned(), 1);
        // Other components each take one, up to the runtime's bound.
        for component in 0..MAX_CHECK_THREADS * 2 {
            let mut schema = doubling(60);
            schema["title"] = json!(format!("component {component}"));
            let schema = Schema::compile(&schema, &runtime.for_component(&format!("c{component}"))).unwrap();
            let check = schema.check_within(&json!({"a": 1}), budget).await;
            assert!(matches!(check, Check::Unchecked(_)), "{check:?}");
            assert!(threads.abandoned() <= MAX_CHECK_THREADS);
        }
        assert_eq!(threads.abandoned(), MAX_CHECK_THREADS);
        let threads = runtime.for_component("cheap");
        // A cheap schema is still checked in place.
        let cheap = Schema::compile(&json!({"type": "string"}), &threads).unwrap();
        assert_eq!(cheap.check(&json!("x")).await, Check::Valid);
        // A costly one that would end is refused at once, saying why.
        let Check::Unchecked(why) =
            Schema::compile(&doubling(2), &threads).unwrap().check(&json!({"a": 1})).await
        else {
            panic!("checked")
        };
        assert!(why.contains("held by checks that ran over"), "{why}");
    }

    #[tokio::test]
    async fn checks_of_one_component_at_once_still_hold_at_most_one_thread() {
        let runtime = CheckThreads::default();
        let threads = runtime.for_component("greedy");
        let budget = Duration::from_millis(30);
        let schemas: Vec<Schema> = (0..4)
            .map(|copy| {
                let mut schema = doubling(60);
                schema["title"] = json!(format!("copy {copy}"));
                Schema::compile(&schema, &threads).unwrap()
            })
            .collect();
        let instance = json!({"a": 1});
        let check = |index: usize| schemas[index].check_within(&instance, budget);
        let (a, b, c, d) = tokio::join!(check(0), check(1), check(2), check(3));
        for check in [a, b, c, d] {
            assert!(matches!(check, Check::Unchecked(_)), "{check:?}");
        }
        assert_eq!(runtime.abandoned(), 1, "one component's checks at once took more than one thread");
    }

    #[test]
    fn a_ref_alone_is_an_alias_and_a_ref_beside_an_applicator_is_costly() {
        let alias = json!({"type": "object", "properties": {"inner": {"$ref": "#/$defs/Inner", "description": "d"}},
            "$defs": {"Inner": {"type": "object", "properties": {"x": {"type": "integer"}}}}});
        assert!(!has_costly_keyword(&alias));
        let beside = json!({"$ref": "#/$defs/A", "properties": {"x": {"$ref": "#"}}, "$defs": {"A": {}}});
        assert!(has_costly_keyword(&beside));
        assert!(has_costly_keyword(&json!({"anyOf": [{"type": "string"}, {"type": "null"}]})));
    }
}
