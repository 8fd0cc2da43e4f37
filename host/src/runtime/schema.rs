//! Checking JSON against a tool's schemas (arguments before a call, structured output
//! after it) within a bound.
//!
//! A check is host code: no epoch interrupts it, and a tool's schema is as untrusted as
//! its code. Some schemas cost far more than a walk of the instance: `anyOf` over `$ref`s
//! that fan out again can double the work at every level, `uniqueItems` is quadratic,
//! `required` or `properties` with thousands of names multiply every object. So a check
//! runs in place only when it is sure to be cheap (a schema without such keywords, and a
//! small product of schema and instance sizes). Any other check runs on a thread of its
//! own for at most [`CHECK_BUDGET`]. A check that runs over cannot be stopped (the thread
//! is abandoned); the call is answered at once, and the schema refuses every later check,
//! so one costly schema holds at most one thread for the life of the process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

/// The longest a check that is not sure to be cheap may run.
pub const CHECK_BUDGET: Duration = Duration::from_secs(5);

/// Keywords whose work is not bounded by one walk of the instance: in-place applicators that
/// fan out, and the quadratic or pattern-matching ones.
const COSTLY_KEYWORDS: [&str; 16] = [
    "$ref",
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

/// The most schema nodes × instance nodes a check in place may take on.
const IN_PLACE_WORK: usize = 1 << 20;

/// A compiled schema, and what a check against it may cost.
pub(crate) struct Schema {
    validator: Arc<jsonschema::Validator>,
    /// JSON values in the schema: the work per instance node is at most about this.
    nodes: usize,
    /// Whether the schema has one of [`COSTLY_KEYWORDS`] (anywhere: a false alarm only
    /// moves a check off this thread).
    costly: bool,
    /// Set once a check ran past [`CHECK_BUDGET`].
    overran: AtomicBool,
}

/// What a check found.
#[derive(Debug, PartialEq)]
pub(crate) enum Check {
    Valid,
    /// Every way the instance breaks the schema (the first five), as one line for a client.
    Invalid(String),
    /// The check ran past [`CHECK_BUDGET`], now or an earlier time.
    Overran,
}

impl Schema {
    /// Compile `schema` (JSON Schema 2020-12 unless `$schema` says otherwise; references to
    /// the network are never fetched).
    pub(crate) fn compile(schema: &Value) -> Result<Self, String> {
        let validator = jsonschema::validator_for(schema).map_err(|error| error.to_string())?;
        Ok(Self {
            validator: Arc::new(validator),
            nodes: node_count(schema),
            costly: has_costly_keyword(schema),
            overran: AtomicBool::new(false),
        })
    }

    /// Check `instance`: in place when that is sure to be cheap (then this resolves in its
    /// first poll), else on a thread of its own within [`CHECK_BUDGET`].
    pub(crate) async fn check(&self, instance: &Value) -> Check {
        self.check_within(instance, CHECK_BUDGET).await
    }

    async fn check_within(&self, instance: &Value, budget: Duration) -> Check {
        if self.overran.load(Ordering::Relaxed) {
            return Check::Overran;
        }
        if !self.costly && self.nodes.saturating_mul(node_count(instance)) <= IN_PLACE_WORK {
            return check(&self.validator, instance);
        }
        let (answer, answered) = tokio::sync::oneshot::channel();
        let (validator, owned) = (self.validator.clone(), instance.clone());
        let spawned = std::thread::Builder::new()
            .name("cordon-schema".into())
            .spawn(move || drop(answer.send(check(&validator, &owned))));
        if spawned.is_err() {
            // No thread to spare: the check runs here, as it would have without the bound.
            return check(&self.validator, instance);
        }
        match tokio::time::timeout(budget, answered).await {
            Ok(Ok(check)) => check,
            Ok(Err(_panicked)) => Check::Invalid("the schema check failed".into()),
            Err(_elapsed) => {
                self.overran.store(true, Ordering::Relaxed);
                tracing::warn!(
                    "a schema check ran past {budget:?}: its thread is abandoned and the schema refuses all further checks"
                );
                Check::Overran
            }
        }
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

fn has_costly_keyword(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(has_costly_keyword),
        Value::Object(fields) => fields
            .iter()
            .any(|(key, value)| COSTLY_KEYWORDS.contains(&key.as_str()) || has_costly_keyword(value)),
        _ => false,
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

    #[tokio::test]
    async fn a_cheap_check_runs_in_place_and_reports_every_problem() {
        let schema =
            Schema::compile(&json!({"type": "object", "properties": {"a": {"type": "string"}}})).unwrap();
        assert!(!schema.costly);
        assert_eq!(schema.check(&json!({"a": "x"})).await, Check::Valid);
        let Check::Invalid(problems) = schema.check(&json!({"a": 1})).await else { panic!() };
        assert!(problems.starts_with("/a: 1 is not of type \"string\""), "{problems}");
    }

    #[tokio::test]
    async fn a_costly_check_is_answered_in_time() {
        let schema = Schema::compile(&doubling(8)).unwrap();
        assert!(schema.costly);
        assert_eq!(schema.check(&json!({"a": "x"})).await, Check::Valid);
        assert!(matches!(schema.check(&json!({"a": 1})).await, Check::Invalid(_)));
    }

    #[tokio::test]
    async fn a_check_that_runs_over_is_abandoned_and_the_schema_refuses_further_checks() {
        // 2^60 steps: this check would never end.
        let schema = Schema::compile(&doubling(60)).unwrap();
        let budget = Duration::from_millis(50);
        let started = std::time::Instant::now();
        assert_eq!(schema.check_within(&json!({"a": 1}), budget).await, Check::Overran);
        assert!(started.elapsed() < Duration::from_secs(2), "answered at its budget");
        assert_eq!(schema.check(&json!({"a": "x"})).await, Check::Overran, "refused at once");
    }
}
