//! Rounds of input (`cordon:tool@0.2.0` `input`) through the runtime, with real guests: the
//! conformance fixture asks and then answers with what it was given; the hostile component
//! asks past every bound (a tool error naming it) and spins in the round that brings the
//! answers (stopped, then cleaned up, like any call); a 0.1.0 component ignores the input.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use std::sync::{Arc, Mutex};

use cordon::runtime::{
    CallEnded, CallObserver, CallOutcome, CleanupOutcome, ClientAbilities, ComponentOptions, InputRequest,
    InputRound, Outcome, Runtime, StopPath, Timeout, ToolLimits,
};
use serde_json::{Value, json};

fn guest(file: &str) -> PathBuf {
    let path = cordon::paths::default_tools_dir().join(file);
    assert!(path.is_file(), "{} is missing: run `cargo xtask guests` first", path.display());
    path
}

/// A runtime serving the fixture, the 0.1.0 component and the hostile one (its calls
/// stopped after 2 s, with a data directory for its cleanup).
async fn runtime() -> Runtime {
    let mut runtime = Runtime::new(common::settings(8)).unwrap();
    runtime.load_file(&guest("conformance-fixture.wasm"), ComponentOptions::default()).await.unwrap();
    runtime.load_file(&guest("legacy-tool.wasm"), ComponentOptions::default()).await.unwrap();
    let limits = ToolLimits { max_duration: Some(Duration::from_secs(2)), ..common::quick_limits() };
    let hostile = ComponentOptions {
        limits,
        data_dir: Some(common::fresh_dir("input-hostile")),
        ..ComponentOptions::default()
    };
    runtime.load_file(&guest("hostile.wasm"), hostile).await.unwrap();
    runtime
}

async fn round(
    runtime: &Runtime,
    tool: &str,
    arguments: Value,
    input: InputRound,
) -> cordon::runtime::CallReport {
    runtime.call(tool, &arguments).await.unwrap().with_input(input).run().await
}

fn everything() -> ClientAbilities {
    ClientAbilities::ELICITATION | ClientAbilities::SAMPLING | ClientAbilities::ROOTS
}

#[tokio::test]
async fn a_tool_asks_then_answers_with_what_it_was_given() {
    let runtime = runtime().await;
    let first =
        round(&runtime, "test_input_required_result_elicitation", json!({}), InputRound::first(everything()))
            .await;
    let Outcome::InputRequired(asked) = first.outcome else {
        panic!("expected a request for input: {first:?}")
    };
    let [(key, InputRequest::Elicit(elicitation))] = asked.requests.as_slice() else {
        panic!("expected one elicitation: {asked:?}")
    };
    assert_eq!(key, "user_name");
    assert_eq!(elicitation.message, "What is your name?");
    let schema: Value = serde_json::from_str(&elicitation.requested_schema).unwrap();
    assert_eq!(schema["required"], json!(["name"]));
    assert!(first.cleanup.is_none(), "a round that asks ended normally: no cleanup");

    let answer = json!({"action": "accept", "content": {"name": "Ada"}}).to_string();
    let retry = InputRound::retry(everything(), vec![("user_name".into(), answer)], asked.state);
    let second = round(&runtime, "test_input_required_result_elicitation", json!({}), retry).await;
    assert_eq!(common::answer(&second), "Hello, Ada!");
}

/// Every call's end, as the call log and the metrics get it.
#[derive(Default)]
struct Ends(Mutex<Vec<CallOutcome>>);

impl CallObserver for Ends {
    fn call_ended(&self, event: &CallEnded) {
        self.0.lock().unwrap().push(event.outcome);
    }
}

#[tokio::test]
async fn a_round_that_asks_is_observed_as_input_required_not_as_ok() {
    let mut runtime = Runtime::new(common::settings(2)).unwrap();
    let ends = Arc::new(Ends::default());
    runtime.observe(ends.clone());
    runtime.load_file(&guest("conformance-fixture.wasm"), ComponentOptions::default()).await.unwrap();
    let tool = "test_input_required_result_elicitation";
    let first = round(&runtime, tool, json!({}), InputRound::first(everything())).await;
    let Outcome::InputRequired(asked) = first.outcome else { panic!("expected a request: {first:?}") };
    let answer = json!({"action": "accept", "content": {"name": "Ada"}}).to_string();
    let retry = InputRound::retry(everything(), vec![("user_name".into(), answer)], asked.state);
    round(&runtime, tool, json!({}), retry).await;
    // Observers get an event when the teardown drops, which `run` does before returning.
    assert_eq!(*ends.0.lock().unwrap(), [CallOutcome::InputRequired, CallOutcome::Ok]);
}

#[tokio::test]
async fn state_comes_back_to_the_next_round_and_a_round_may_ask_again() {
    let runtime = runtime().await;
    let tool = "test_input_required_result_multi_round";
    let first = round(&runtime, tool, json!({}), InputRound::first(everything())).await;
    let Outcome::InputRequired(step1) = first.outcome else { panic!("{first:?}") };
    assert_eq!(step1.requests[0].0, "step1");
    let name = json!({"action": "accept", "content": {"name": "Ada"}}).to_string();
    let second = round(
        &runtime,
        tool,
        json!({}),
        InputRound::retry(everything(), vec![("step1".into(), name)], step1.state),
    )
    .await;
    let Outcome::InputRequired(step2) = second.outcome else { panic!("{second:?}") };
    assert_eq!(step2.requests[0].0, "step2");
    assert_eq!(step2.state.as_deref(), Some(&b"name:Ada"[..]));
    let color = json!({"action": "accept", "content": {"color": "green"}}).to_string();
    let third = round(
        &runtime,
        tool,
        json!({}),
        InputRound::retry(everything(), vec![("step2".into(), color)], step2.state),
    )
    .await;
    assert_eq!(common::answer(&third), "Ada likes green.");
}

#[tokio::test]
async fn the_guest_sees_what_the_client_can_be_asked() {
    let runtime = runtime().await;
    let tool = "test_input_required_result_capabilities";
    let sampling_only = round(&runtime, tool, json!({}), InputRound::first(ClientAbilities::SAMPLING)).await;
    let Outcome::InputRequired(asked) = sampling_only.outcome else { panic!("{sampling_only:?}") };
    let methods: Vec<&str> = asked.requests.iter().map(|(_, request)| request.method()).collect();
    assert_eq!(methods, ["sampling/createMessage"]);
    let nothing = round(&runtime, tool, json!({}), InputRound::default()).await;
    assert!(common::answer(&nothing).contains("can be asked nothing"), "{nothing:?}");
}

/// A request for input past a bound ends the call with an error naming it, and the guest,
/// which expected another round, is cleaned up as a stopped call is (it may hold something
/// for the round it asked). Before, no cleanup ran, and the note it left was lost.
#[tokio::test]
async fn asking_past_a_bound_is_a_tool_error_naming_it() {
    let runtime = runtime().await;
    let ask = |count: usize, key_len: usize, state_bytes: usize| {
        let runtime = &runtime;
        async move {
            let arguments = json!({"count": count, "key_len": key_len, "state_bytes": state_bytes});
            let report = round(runtime, "ask", arguments, InputRound::first(everything())).await;
            let cleaned_up = report.cleanup.map(|cleanup| cleanup.outcome);
            match &report.outcome {
                Outcome::InputRequired(_) => assert_eq!(cleaned_up, None, "a round that asks is not over"),
                _ => assert_eq!(cleaned_up, Some(CleanupOutcome::Completed), "{:?}", report.outcome),
            }
            report.outcome
        }
    };
    assert!(matches!(ask(16, 64, 16 * 1024).await, Outcome::InputRequired(_)), "at the bounds is fine");
    let too_many = ask(17, 8, 0).await;
    assert!(
        matches!(&too_many, Outcome::InvalidResult(why) if why.contains("17 inputs") && why.contains("limit is 16")),
        "{too_many:?}"
    );
    let long_key = ask(1, 65, 0).await;
    assert!(
        matches!(&long_key, Outcome::InvalidResult(why) if why.contains("1 to 64 characters")),
        "{long_key:?}"
    );
    let big_state = ask(1, 8, 16 * 1024 + 1).await;
    assert!(
        matches!(&big_state, Outcome::InvalidResult(why) if why.contains("16385 bytes") && why.contains("limit is 16384")),
        "{big_state:?}"
    );
}

#[tokio::test]
async fn a_round_is_stopped_and_cleaned_up_like_any_call() {
    let runtime = runtime().await;
    let first = round(&runtime, "ask_then_spin", json!({}), InputRound::first(everything())).await;
    let Outcome::InputRequired(asked) = first.outcome else { panic!("{first:?}") };
    let roots = json!({"roots": []}).to_string();
    let retry = InputRound::retry(everything(), vec![("roots".into(), roots)], asked.state);
    let second = round(&runtime, "ask_then_spin", json!({}), retry).await;
    assert!(matches!(second.outcome, Outcome::TimedOut(Timeout::MaxDuration(_))), "{second:?}");
    assert_ne!(second.stop_path, StopPath::Returned, "stopped by force: it never returns");
    assert_eq!(second.cleanup.map(|cleanup| cleanup.outcome), Some(CleanupOutcome::Completed));
}

#[tokio::test]
async fn a_0_1_0_component_ignores_the_input() {
    let runtime = runtime().await;
    assert!(runtime.snapshot().tool_for(None, "legacy_echo").is_some(), "the 0.1.0 component's tool");
    let retry = InputRound::retry(everything(), vec![("x".into(), "{}".into())], Some(b"state".to_vec()));
    let report = round(&runtime, "legacy_echo", json!({"text": "still here"}), retry).await;
    assert_eq!(common::answer(&report), "still here");
}
