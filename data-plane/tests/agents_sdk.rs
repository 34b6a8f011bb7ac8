//! The OpenAI Agents SDK runs a tool-using agent through the proxy against an Anthropic member:
//! the SDK speaks the Responses API, the proxy translates each turn to Messages and back, the
//! agent calls its tool, sends the result, and ends with the model's answer.
//!
//! `SWITCHYARD_TEST_PYTHON` must name a python with `openai-agents` installed (scripts/test sets
//! it); without it this test fails rather than skips.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{channel, run_python, start};
use switchyard_mock_upstream::{Behavior, Matcher, MockUpstream};

const AGENT: &str = r#"
import json, sys
from openai import AsyncOpenAI
from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled

set_tracing_disabled(True)
set_default_openai_client(
    AsyncOpenAI(base_url=sys.argv[1] + "/v1", api_key=sys.argv[2], max_retries=0, timeout=20),
    use_for_tracing=False,
)
calls = []

@function_tool
def get_weather(city: str) -> str:
    """The current weather of a city."""
    calls.append(city)
    return f"21 degrees in {city} (TOOL-RESULT-MARK)"

agent = Agent(name="weather", instructions="Answer briefly.", model="agent-model", tools=[get_weather])
result = Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4)
print(json.dumps({"final": result.final_output, "calls": calls}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_sdk_agent_uses_its_tool_through_an_anthropic_member() {
    let up = MockUpstream::start().await.unwrap();
    // The first turn calls the tool; the next one answers.
    up.on(
        Matcher::any(),
        Behavior::ok()
            .tool_call("get_weather", r#"{"city":"Paris"}"#)
            .times(1),
    );
    up.on(
        Matcher::any(),
        Behavior::ok().text("It is 21 degrees in Paris."),
    );
    let yaml = format!(
        "channels:\n{}routes:\n  - model_pattern: agent-model\n    members:\n      - {{ channel: claude, upstream_model: claude-real }}\n",
        channel("claude", &up.base_url(), &["sk-ant"]).replace("provider: openai", "provider: anthropic"),
    );
    let proxy = start(&yaml).await;
    let result = run_python(&proxy, AGENT).await;
    assert_eq!(result["calls"], serde_json::json!(["Paris"]), "{result}");
    assert_eq!(result["final"], "It is 21 degrees in Paris.");
    // Both turns went to the Anthropic member as Messages requests, the second with the tool's
    // result in Anthropic's shape.
    let requests = up.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(requests.iter().all(|r| r.path == "/v1/messages"));
    let second = requests[1].json();
    assert_eq!(second["model"], "claude-real");
    let blocks = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect::<Vec<_>>();
    let result_block = blocks
        .iter()
        .find(|b| b["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result in {second}"));
    assert!(
        result_block.to_string().contains("TOOL-RESULT-MARK"),
        "{result_block}"
    );
}
