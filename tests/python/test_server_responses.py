"""The OpenAI Responses API (/v1/responses) through `ridge serve` with the official `openai` client.

qwen2.5-coder-0.5b (its chat template renders tools), greedy: a text response and its
output_text, max_output_tokens ending it as "incomplete", a stream whose text and final
response equal the whole answer, a forced function_call and a function_call_output turn
after it, a json_schema answer that parses (also through responses.parse), the stored-
response fields refused with their field named, and a client gone mid-stream cancelled.
"""

import json
import time

import pytest

from test_server_api import openai_client, qwen_server

openai = pytest.importorskip("openai")

WEATHER_TOOL = {
    "type": "function",
    "name": "get_current_weather",
    "description": "Get the current weather in a given city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"}},
        "required": ["city"],
    },
}
QUESTION = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


@pytest.fixture(scope="module")
def qwen():
    with qwen_server() as server:
        yield server


@pytest.fixture(scope="module")
def client(qwen):
    return openai_client(qwen, api_key="sk-test")


def test_text_response(client):
    r = client.responses.create(model="qwen", input="Say hello.", instructions="Answer in one short sentence.",
                                max_output_tokens=16, temperature=0, metadata={"k": "v"}, store=False)
    assert r.id.startswith("resp_") and r.object == "response" and r.model == "qwen"
    assert r.status in ("completed", "incomplete") and r.error is None
    assert r.instructions == "Answer in one short sentence." and r.metadata == {"k": "v"}
    message = r.output[0]
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.content[0].type == "output_text" and message.content[0].annotations == []
    assert r.output_text == message.content[0].text and r.output_text
    u = r.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 16 and u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cached_tokens >= 0 and u.output_tokens_details.reasoning_tokens == 0


def test_max_output_tokens_is_incomplete(client):
    r = client.responses.create(model="qwen", input="Count from one to twenty in words.", max_output_tokens=2,
                                temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 2 and r.output[0].status == "incomplete"


def test_input_items_and_reasoning_effort(client):
    r = client.responses.create(model="qwen", max_output_tokens=8, temperature=0, reasoning={"effort": "low"},
                                input=[{"type": "message", "role": "developer", "content": "Be brief."},
                                       {"role": "user", "content": [{"type": "input_text", "text": "Say hi."}]},
                                       {"role": "assistant", "content": [{"type": "output_text", "text": "Hi!"}]},
                                       {"role": "user", "content": "Again."}])
    assert r.output_text and r.usage.input_tokens > 10


def test_stream_equals_whole(client):
    kwargs = dict(model="qwen", input="Say hello.", max_output_tokens=24, temperature=0)
    whole = client.responses.create(**kwargs)
    events = list(client.responses.create(stream=True, **kwargs))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed" if whole.status == "completed" else "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    final = events[-1].response
    assert final.id == events[0].response.id and final.output_text == whole.output_text
    assert final.status == whole.status
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens
    # The SDK's stream helper assembles the same response from the events.
    with client.responses.stream(**kwargs) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        assembled = stream.get_final_response()
    assert text == whole.output_text and assembled.output_text == whole.output_text


def test_function_call_round_trip(client):
    r = client.responses.create(model="qwen", input=QUESTION, tools=[WEATHER_TOOL], max_output_tokens=64,
                                temperature=0, tool_choice={"type": "function", "name": "get_current_weather"})
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1 and r.status == "completed"
    call = calls[0]
    assert call.id.startswith("fc_") and call.call_id.startswith("call_") and call.status == "completed"
    assert call.name == "get_current_weather" and isinstance(json.loads(call.arguments)["city"], str)
    assert r.tool_choice.name == "get_current_weather" and r.tools[0].name == "get_current_weather"

    follow = client.responses.create(
        model="qwen", tools=[WEATHER_TOOL], max_output_tokens=32, temperature=0,
        input=QUESTION + [item.model_dump(exclude_none=True) for item in r.output]
        + [{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 22 celsius."}])
    assert follow.output and follow.usage.input_tokens > r.usage.input_tokens


def test_streamed_function_call(client):
    events = list(client.responses.create(model="qwen", input=QUESTION, tools=[WEATHER_TOOL], max_output_tokens=64,
                                          temperature=0, stream=True, tool_choice="required"))
    added = [e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert len(added) >= 1 and added[0].item.name == "get_current_weather"
    item_id = added[0].item.id
    arguments = "".join(e.delta for e in events
                        if e.type == "response.function_call_arguments.delta" and e.item_id == item_id)
    done = [e for e in events if e.type == "response.function_call_arguments.done" and e.item_id == item_id]
    assert len(done) == 1 and done[0].arguments == arguments and "city" in json.loads(arguments)
    final = events[-1]
    assert final.type == "response.completed"
    assert [o.id for o in final.response.output if o.type == "function_call"][0] == item_id


def test_json_schema_output_parses(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    r = client.responses.create(model="qwen", input="Name a large city in France.", max_output_tokens=64,
                                temperature=0, text={"format": {"type": "json_schema", "name": "place",
                                                                "schema": schema, "strict": True}})
    value = json.loads(r.output_text)
    assert set(value) == {"city", "country"} and all(isinstance(v, str) for v in value.values())
    assert r.text.format.type == "json_schema" and r.text.format.name == "place"

    pydantic = pytest.importorskip("pydantic")

    class Place(pydantic.BaseModel):
        city: str
        country: str

    parsed = client.responses.parse(model="qwen", input="Name a large city in Italy.", max_output_tokens=64,
                                    temperature=0, text_format=Place)
    assert isinstance(parsed.output_parsed, Place) and parsed.output_parsed.city


def test_previous_response_id_is_refused(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="qwen", input="And then?", previous_response_id="resp_abc", store=True)
    assert err.value.param == "previous_response_id"
    assert "stores no responses" in err.value.message


def test_bad_fields_are_named(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="qwen", input="hi", tools=[{"type": "web_search"}])
    assert err.value.param == "tools[0].type" and err.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="qwen", input="hi", max_output_tokens=0)
    assert err.value.param == "max_output_tokens" and "max_output_tokens" in err.value.message
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model="gpt-5", input="hi")
    assert err.value.param == "model"


def test_wrong_key_is_refused(qwen):
    bad = openai_client(qwen, api_key="wrong")
    with pytest.raises(openai.AuthenticationError):
        bad.responses.create(model="qwen", input="hi")


def test_client_gone_mid_stream_is_cancelled(qwen):
    idle = qwen.wait_idle()
    n_long = 1500
    body = {"model": "qwen", "input": "Count from 1 to 1000, one number per line.", "max_output_tokens": n_long,
            "ignore_eos": True}
    s = qwen.open_stream("/v1/responses", body, headers=b"Authorization: Bearer sk-test\r\n",
                         until=b"response.output_text.delta")
    # /metrics may trail the stream by a step.
    deadline = time.monotonic() + 10
    while qwen.metrics()["ridge_kv_blocks_used"] == idle["ridge_kv_blocks_used"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert qwen.metrics()["ridge_kv_blocks_used"] > idle["ridge_kv_blocks_used"]
    s.close()
    t0 = time.monotonic()
    after = qwen.wait_idle(timeout=10)
    assert time.monotonic() - t0 < 5
    assert after["ridge_kv_blocks_used"] == idle["ridge_kv_blocks_used"]
    assert after["ridge_generation_tokens_total"] - idle["ridge_generation_tokens_total"] < n_long
