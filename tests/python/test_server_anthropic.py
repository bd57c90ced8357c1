"""The Anthropic Messages API through `ridge serve` with the official `anthropic` client.

qwen2.5-coder-0.5b (its chat template renders tools), greedy: a text answer, a forced
tool_use (tool_choice {type: tool}) and a tool_result turn after it, count_tokens equal
to the prompt the same request prefilled, and a bad request naming its field.
"""

import pytest

from test_server_api import qwen_server

WEATHER_TOOL = {
    "name": "get_current_weather",
    "description": "Get the current weather in a given city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"}},
        "required": ["city"],
    },
}
# This SDK version takes no `temperature` argument; it goes in the body as the API has it.
GREEDY = {"temperature": 0}
QUESTION = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


@pytest.fixture(scope="module")
def qwen():
    with qwen_server() as server:
        yield server


@pytest.fixture(scope="module")
def client(qwen):
    anthropic = pytest.importorskip("anthropic")
    # The SDK sends the key as x-api-key, and anthropic-version.
    return anthropic.Anthropic(base_url=qwen.base_url, api_key="sk-test", timeout=120, max_retries=0)


def test_text_message(client):
    m = client.messages.create(model="qwen", max_tokens=16, extra_body=GREEDY, system="Answer in one short sentence.",
                               messages=[{"role": "user", "content": "Say hello."}], metadata={"user_id": "u1"})
    assert m.id.startswith("msg_") and m.type == "message" and m.role == "assistant"
    assert m.content and m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 16


def test_max_tokens_stop_reason(client):
    m = client.messages.create(model="qwen", max_tokens=2, extra_body=GREEDY,
                               messages=[{"role": "user", "content": "Count from one to twenty in words."}])
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 2


def test_count_tokens_matches_prefill(client):
    kwargs = dict(model="qwen", system="Be brief.", messages=QUESTION, tools=[WEATHER_TOOL])
    counted = client.messages.count_tokens(**kwargs)
    m = client.messages.create(max_tokens=1, extra_body=GREEDY, **kwargs)
    assert counted.input_tokens == m.usage.input_tokens


def test_forced_tool_use_then_tool_result(client):
    m = client.messages.create(model="qwen", max_tokens=64, extra_body=GREEDY, messages=QUESTION, tools=[WEATHER_TOOL],
                               tool_choice={"type": "tool", "name": "get_current_weather"})
    assert m.stop_reason == "tool_use"
    calls = [b for b in m.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].id.startswith("toolu_")
    assert calls[0].name == "get_current_weather" and isinstance(calls[0].input.get("city"), str)

    follow = client.messages.create(
        model="qwen", max_tokens=32, extra_body=GREEDY, tools=[WEATHER_TOOL],
        messages=QUESTION + [
            {"role": "assistant", "content": [b.model_dump() for b in m.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                          "content": [{"type": "text", "text": "Sunny, 22 celsius."}]}]},
        ])
    assert follow.content and follow.usage.input_tokens > m.usage.input_tokens


def test_bad_request_names_the_field(client):
    anthropic = pytest.importorskip("anthropic")
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="qwen", max_tokens=8, messages=QUESTION, stop_sequences="END")
    assert err.value.body["type"] == "error"
    assert err.value.body["error"]["type"] == "invalid_request_error"
    assert "stop_sequences" in err.value.body["error"]["message"]


def test_wrong_key_is_refused(qwen):
    anthropic = pytest.importorskip("anthropic")
    bad = anthropic.Anthropic(base_url=qwen.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as err:
        bad.messages.create(model="qwen", max_tokens=4, messages=QUESTION)
    assert err.value.body["error"]["type"] == "authentication_error"


def test_streamed_text_equals_whole(client, qwen):
    kwargs = dict(model="qwen", max_tokens=24, extra_body=GREEDY, messages=[{"role": "user", "content": "Say hello."}])
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens


def test_streamed_event_sequence(qwen):
    import json
    import urllib.request
    body = {"model": "qwen", "max_tokens": 48, "stream": True, "temperature": 0, "messages": QUESTION,
            "tools": [WEATHER_TOOL], "tool_choice": {"type": "tool", "name": "get_current_weather"}}
    req = urllib.request.Request(qwen.base_url + "/v1/messages", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "x-api-key": "sk-test",
                                          "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(req, timeout=120) as r:
        events = [e for e in r.read().decode().split("\n\n") if e]
    names = [e.split("\n")[0].removeprefix("event: ") for e in events]
    datas = [json.loads(e.split("\n")[1].removeprefix("data: ")) for e in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert all(n == d["type"] for n, d in zip(names, datas))
    # Each block closed before the next opens.
    open_index = None
    for d in datas:
        if d["type"] == "content_block_start":
            assert open_index is None
            open_index = d["index"]
        elif d["type"] == "content_block_stop":
            assert d["index"] == open_index
            open_index = None
    assert open_index is None
    tool = [d for d in datas if d["type"] == "content_block_start" and d["content_block"]["type"] == "tool_use"]
    assert len(tool) == 1 and tool[0]["content_block"]["name"] == "get_current_weather"
    partial = "".join(d["delta"]["partial_json"] for d in datas
                      if d["type"] == "content_block_delta" and d["delta"]["type"] == "input_json_delta")
    assert "city" in json.loads(partial)
    assert datas[-2]["delta"]["stop_reason"] == "tool_use"
