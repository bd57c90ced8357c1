"""Tool calls through `ridge serve` with the official `openai` client.

qwen2.5-coder-1.5b (its own chat template renders the tools and teaches the Hermes
<tool_call> syntax; this coder model writes its calls as a ```json fence, which the server
accepts when it names a requested tool), greedy: the model calls a weather tool, the call comes back parsed
(name, arguments as a JSON string), the tool's result goes back as a `tool` message and
the model answers in text. Streamed and not streamed give the same call. The request
contract (tool_choice refusals, bad tools) is checked on stories260K.
"""

import json

import pytest

from test_server_api import STORIES, RidgeServer, cached_model, gemma, openai_client  # noqa: F401 (fixture)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

MESSAGES = [
    # Qwen2.5-Coder-1.5B, greedy: without the last sentence it answers a tool result with
    # another call (in the template's own "{{...}}" example form).
    {"role": "system", "content": "You are a helpful assistant. When a tool can answer the question, call the tool "
                                  "instead of guessing. Once you have the tool's result, answer the user in plain "
                                  "text."},
    {"role": "user", "content": "What is the weather like in Paris right now?"},
]


@pytest.fixture(scope="module")
def qwen():
    path = cached_model("qwen2.5-coder-1.5b")
    if path is None:
        pytest.skip("qwen2.5-coder-1.5b is not in the model cache (scripts/fetch-models qwen2.5-coder-1.5b)")
    with RidgeServer(path, "--parallel", 2, "-c", 2048, "--alias", "qwen") as server:
        yield server


@pytest.fixture(scope="module")
def stories():
    with RidgeServer(STORIES, "--parallel", 2, "-c", 256, "--alias", "stories") as server:
        yield server


def streamed_message(client, **kwargs):
    """The streamed chunks put together: content, tool calls by index, finish reason."""
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        choice = chunk.choices[0]
        if choice.delta.content:
            content += choice.delta.content
        for tc in choice.delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                assert call["id"] is None, "a call's id comes once, in its first chunk"
                call["id"] = tc.id
                assert tc.type == "function"
            if tc.function and tc.function.name:
                call["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                call["arguments"] += tc.function.arguments
        if choice.finish_reason:
            finish = choice.finish_reason
    return content, [calls[i] for i in sorted(calls)], finish


def test_tool_call_round_trip(qwen):
    client = openai_client(qwen)
    request = dict(model="qwen", messages=MESSAGES, tools=[WEATHER_TOOL], temperature=0, max_tokens=128)
    out = client.chat.completions.create(**request)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls
    assert len(calls) == 1, choice.message
    call = calls[0]
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "get_current_weather"
    arguments = json.loads(call.function.arguments)
    assert "paris" in arguments["city"].lower()
    assert "<tool_call>" not in (choice.message.content or "")

    # Streamed, the same call.
    content, streamed_calls, finish = streamed_message(client, **request)
    assert finish == "tool_calls"
    assert "<tool_call>" not in content
    assert [(c["name"], json.loads(c["arguments"])) for c in streamed_calls] == [(call.function.name, arguments)]
    assert streamed_calls[0]["id"].startswith("call_")

    # The result goes back; the model answers in text, naming what the tool said.
    follow_up = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(include={"id", "type", "function"})]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"city": "Paris", "temperature_c": 17,
                                                                         "conditions": "light rain"})},
    ]
    final = client.chat.completions.create(model="qwen", messages=follow_up, tools=[WEATHER_TOOL], temperature=0,
                                           max_tokens=96)
    answer = final.choices[0]
    assert answer.finish_reason == "stop", answer
    assert not answer.message.tool_calls
    assert "17" in answer.message.content, answer.message.content
    # The tool result reached the prompt: more prompt tokens than the first turn.
    assert final.usage.prompt_tokens > out.usage.prompt_tokens


def test_tool_choice_none_shows_no_tools(qwen):
    client = openai_client(qwen)
    with_tools = client.chat.completions.create(model="qwen", messages=MESSAGES, tools=[WEATHER_TOOL],
                                                tool_choice="none", temperature=0, max_tokens=16)
    without = client.chat.completions.create(model="qwen", messages=MESSAGES, temperature=0, max_tokens=16)
    # "none" renders no tools: the very prompt of a request without them.
    assert with_tools.usage.prompt_tokens == without.usage.prompt_tokens
    assert with_tools.choices[0].message.content == without.choices[0].message.content
    assert not with_tools.choices[0].message.tool_calls


def error_of(server, body):
    status, out = server.post("/v1/chat/completions", body)
    return status, out["error"]


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools[0].type"),
])
def test_refused_tool_requests_name_the_field(stories, extra, param):
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER_TOOL], **extra}
    status, error = error_of(stories, body)
    assert status == 400
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    # The server is still there.
    assert stories.get("/health")[0] == 200


@pytest.mark.parametrize("choice", [
    "required", {"type": "function", "function": {"name": "get_current_weather"}}])
def test_forced_tool_calls_on_a_model_without_a_template_of_its_own(gemma, choice):
    # This Gemma 3 GGUF carries no tokenizer.chat_template (ridge formats its chats with the
    # built-in Gemma turns), so it cannot be shown tools at all: a forced call is refused
    # naming 'tools', without advice to use 'auto', which it refuses too. (A template of its
    # own without a <tool_call> syntax is refused naming tool_choice: tool_calls_test.cpp.)
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER_TOOL], "tool_choice": choice}
    status, error = error_of(gemma, body)
    assert status == 400
    assert error["param"] == "tools"
    assert "no chat template of its own" in error["message"]
    assert "use 'auto'" not in error["message"]
