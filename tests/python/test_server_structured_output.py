"""Structured output through `ridge serve` with the official `openai` client.

qwen2.5-coder-0.5b, greedy, several requests at once (their masks are applied per request
in the same batches): every json_schema answer of a varied schema set (nested objects,
arrays with bounds, enums, numbers, anyOf, nullable types, $defs) parses and validates
with the `jsonschema` package, streamed too; json_object answers parse as objects; a GBNF
`grammar` constrains /v1/completions; tool_choice "required" and a named function come
back as valid tool calls of the right tool whose arguments validate against its schema.
"""

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from test_server_api import RidgeServer, cached_model, openai_client

jsonschema = pytest.importorskip("jsonschema")

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
                       "languages": {"type": "array", "items": {"type": "string", "maxLength": 20},
                                     "minItems": 1, "maxItems": 3}},
        "required": ["name", "age", "languages"], "additionalProperties": False,
    },
    "order": {
        "type": "object",
        "properties": {
            "customer": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                                          "city": {"type": "string", "maxLength": 30}},
                         "required": ["name", "city"], "additionalProperties": False},
            "items": {"type": "array", "minItems": 1, "maxItems": 3,
                      "items": {"type": "object", "properties": {"product": {"type": "string", "maxLength": 30},
                                                                 "quantity": {"type": "integer"}},
                                "required": ["product", "quantity"], "additionalProperties": False}},
            "paid": {"type": "boolean"},
        },
        "required": ["customer", "items", "paid"], "additionalProperties": False,
    },
    "color": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue", "yellow"]}, "is_primary": {"type": "boolean"},
                       "hex": {"type": "string", "maxLength": 7}},
        "required": ["color", "is_primary", "hex"], "additionalProperties": False,
    },
    "weather": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30},
                       "temperatures": {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 5},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "temperatures", "unit"], "additionalProperties": False,
    },
    "answer": {
        "type": "object",
        "properties": {"result": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 20}]},
                       "explanation": {"type": ["string", "null"], "maxLength": 60}},
        "required": ["result", "explanation"], "additionalProperties": False,
    },
    "line": {
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                            "required": ["x", "y"], "additionalProperties": False}},
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"},
                       "label": {"type": "string", "maxLength": 20}},
        "required": ["start", "end", "label"], "additionalProperties": False,
    },
}

PROMPTS = {
    "person": "Invent a programmer and describe them.",
    "order": "Invent a small online shop order.",
    "color": "Pick a color of the rainbow.",
    "weather": "Give a three-day temperature forecast for Oslo.",
    "answer": "What is 6 times 7?",
    "line": "Describe a line segment from the origin to (3, 4).",
}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Get the current time in a time zone.",
    "parameters": {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 40}},
                   "required": ["timezone"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def qwen():
    path = cached_model("qwen2.5-coder-0.5b")
    if path is None:
        pytest.skip("qwen2.5-coder-0.5b is not in the model cache (scripts/fetch-models qwen2.5-coder-0.5b)")
    with RidgeServer(path, "--parallel", 6, "-c", 4096, "--alias", "qwen") as server:
        yield server


def ask(client, name, **extra):
    return client.chat.completions.create(
        model="qwen", messages=[{"role": "user", "content": PROMPTS[name] + " Answer in JSON."}],
        temperature=0, max_tokens=160, **extra)


def schema_format(name):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}}


def test_every_json_schema_answer_parses_and_validates(qwen):
    client = openai_client(qwen)
    with ThreadPoolExecutor(len(SCHEMAS)) as pool:
        answers = dict(zip(SCHEMAS, pool.map(lambda n: ask(client, n, response_format=schema_format(n)), SCHEMAS)))
    for name, r in answers.items():
        choice = r.choices[0]
        assert choice.finish_reason == "stop", (name, choice.message.content)
        value = json.loads(choice.message.content)
        jsonschema.validate(value, SCHEMAS[name])


def test_streamed_json_schema_answer_validates(qwen):
    client = openai_client(qwen)
    chunks = list(ask(client, "order", response_format=schema_format("order"), stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), SCHEMAS["order"])
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_json_object_answers_are_objects(qwen):
    client = openai_client(qwen)
    # Questions with short answers: a json_object answer has no schema to bound it, and one
    # cut off by max_tokens ("Invent a programmer and describe them" rambles past 160
    # tokens) is rightly not complete JSON.
    for name in ("color", "answer"):
        r = ask(client, name, response_format={"type": "json_object"})
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
        assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_gbnf_grammar_constrains_completions(qwen):
    client = openai_client(qwen)
    r = client.completions.create(model="qwen", prompt="Three prime numbers:", temperature=0, max_tokens=30,
                                  extra_body={"grammar": 'root ::= " " [0-9]{1,3} (", " [0-9]{1,3}){2} "."'})
    assert re.fullmatch(r" \d{1,3}, \d{1,3}, \d{1,3}\.", r.choices[0].text), r.choices[0].text
    assert r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("choice, expected", [
    ("required", "get_weather"),
    ({"type": "function", "function": {"name": "get_time"}}, "get_time"),
])
def test_forced_tool_calls_round_trip(qwen, choice, expected):
    client = openai_client(qwen)
    r = client.chat.completions.create(
        model="qwen", messages=[{"role": "user", "content": "What's the weather like in Paris?"}],
        tools=[WEATHER_TOOL, TIME_TOOL], tool_choice=choice, temperature=0, max_tokens=100)
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls and message.tool_calls[0].function.name == expected
    for call in message.tool_calls:
        tool = WEATHER_TOOL if call.function.name == "get_weather" else TIME_TOOL
        jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])


def test_unsupported_schema_keyword_is_a_400_naming_it(qwen):
    status, out = qwen.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}}}})
    assert status == 400
    assert out["error"]["param"] == "response_format.json_schema.schema"
    assert "#/properties/n/minimum" in out["error"]["message"]
