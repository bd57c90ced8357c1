"""ridge.serve's parts that need neither Ray nor a model: the prefix affinity that picks a
replica (exact choices, consistent hashing, load spill, the owner map's bound) and the
OpenAI request parsing (defaults, errors naming the field, the routing text)."""

from __future__ import annotations

import pytest

from ridge.serve.affinity import PrefixAffinity
from ridge.serve.protocol import ApiError, Endpoint, parse_request, routing_text

SYSTEM = "You are a careful assistant who answers in one short sentence. " * 4  # 4 blocks and more
REPLICAS = ["a1", "b2", "c3", "d4"]


def test_prompts_sharing_a_prefix_go_to_one_replica():
    affinity = PrefixAffinity(block_chars=64)
    first = affinity.choose(SYSTEM + "What is 2 + 2?", REPLICAS, {})[0]
    for question in ["Name a colour.", "Where is Paris?", "Why is the sky blue?"]:
        order = affinity.choose(SYSTEM + question, REPLICAS, {})
        assert order[0] == first
        assert sorted(order) == sorted(REPLICAS)  # the others follow, as fallbacks


def test_first_choice_is_rendezvous_hashing_of_the_first_block():
    affinity = PrefixAffinity(block_chars=8)
    text = "abcdefgh" + "ijklmnop"
    key = affinity.prefix_keys(text)[0]
    assert affinity.choose(text, REPLICAS, {})[0] == PrefixAffinity.rendezvous(key, REPLICAS)[0]
    # Keys chain: the second block's key depends on the first block.
    assert affinity.prefix_keys("abcdefghXX")[0] == key
    assert affinity.prefix_keys("zzzzzzzzijklmnop")[1] != affinity.prefix_keys(text)[1]
    # A prompt shorter than a block is one key of its own.
    assert len(affinity.prefix_keys("abc")) == 1 and affinity.prefix_keys("abc") != affinity.prefix_keys("abd")


def test_removing_a_replica_moves_only_its_prefixes():
    prompts = [f"prompt number {i:04d} " * 8 for i in range(400)]
    before = {p: PrefixAffinity().choose(p, REPLICAS, {})[0] for p in prompts}
    assert set(before.values()) == set(REPLICAS)  # spread over all of them
    after = {p: PrefixAffinity().choose(p, REPLICAS[:3], {})[0] for p in prompts}
    moved = [p for p in prompts if before[p] != after[p]]
    assert moved and all(before[p] == "d4" for p in moved)
    assert len(moved) == sum(1 for r in before.values() if r == "d4")


def test_a_busy_owner_spills_to_the_least_loaded_and_the_prefix_follows():
    affinity = PrefixAffinity(block_chars=64, imbalance=2)
    owner = affinity.choose(SYSTEM + "q1", REPLICAS, {})[0]
    others = [r for r in REPLICAS if r != owner]
    load = {r: 3 for r in others}
    load[owner] = 5  # 2 beyond the least: not yet over the imbalance
    assert affinity.choose(SYSTEM + "q2", REPLICAS, load)[0] == owner
    load[others[1]] = 0
    load[owner] = 3  # 3 beyond: spills to the least-loaded
    assert affinity.choose(SYSTEM + "q3", REPLICAS, load)[0] == others[1]
    # The same long prompt again, loads even: its longest prefix now lives on others[1].
    assert affinity.choose(SYSTEM + "q3", REPLICAS, {})[0] == others[1]
    # A gone owner falls back to hashing over those left.
    left = [r for r in REPLICAS if r != others[1]]
    assert affinity.choose(SYSTEM + "q3", left, {})[0] in left


def test_owner_map_is_bounded_and_drops_the_least_recently_used():
    affinity = PrefixAffinity(block_chars=4, max_blocks=2, capacity=6)
    for i in range(10):
        affinity.choose(f"{i:04d}{i:04d}", REPLICAS, {})
    assert len(affinity.owners()) == 6
    assert set(affinity.prefix_keys("00090009")) <= set(affinity.owners())
    assert not set(affinity.prefix_keys("00000000")) & set(affinity.owners())
    assert affinity.choose("x", [], {}) == []
    with pytest.raises(ValueError, match="block_chars"):
        PrefixAffinity(block_chars=0)


def test_chat_routing_text_shares_the_leading_messages():
    system = {"role": "system", "content": SYSTEM}
    a = routing_text({"messages": [system, {"role": "user", "content": "Hi"}]})
    b = routing_text({"messages": [system, {"role": "user", "content": [{"type": "text", "text": "Bye"}]}]})
    assert a.startswith("<system>" + SYSTEM) and b.startswith("<system>" + SYSTEM) and a != b
    assert routing_text({"prompt": ["one prompt"]}) == "one prompt"
    assert routing_text({"prompt": [1, 2, 3]}) == "1,2,3"
    assert routing_text("not a body") == "" and routing_text({"messages": [None]}) == "<>"


def test_parse_defaults_and_fields():
    req = parse_request(Endpoint.COMPLETIONS, {"model": "m", "prompt": "Hello", "temperature": 0, "stop": "\n",
                                               "seed": -1, "n": 2})
    assert req.prompt == "Hello" and req.params.max_tokens == 16 and req.params.temperature == 0
    assert req.params.stop == ["\n"] and req.params.seed == 2**64 - 1 and req.params.n == 2 and not req.stream
    chat = parse_request(Endpoint.CHAT, {"messages": [{"role": "developer", "content": "Be brief."},
                                                      {"role": "user", "content": "Hi"}],
                                         "max_completion_tokens": 5, "stream": True,
                                         "stream_options": {"include_usage": True}})
    assert chat.messages == [("system", "Be brief."), ("user", "Hi")] and chat.params.max_tokens == 5
    assert chat.stream and chat.include_usage
    assert parse_request(Endpoint.CHAT, {"messages": [{"role": "user", "content": "x"}]}).params.max_tokens is None
    assert parse_request(Endpoint.COMPLETIONS, {"prompt": [2, 5, 7]}).prompt == [2, 5, 7]


@pytest.mark.parametrize("endpoint, body, param", [
    (Endpoint.COMPLETIONS, {"prompt": "x", "max_tokens": 0}, "max_tokens"),
    (Endpoint.COMPLETIONS, {"prompt": "x", "temperature": "hot"}, "temperature"),
    (Endpoint.COMPLETIONS, {"prompt": "x", "top_p": 1.5}, "top_p"),
    (Endpoint.COMPLETIONS, {"prompt": ["a", "b"]}, "prompt"),
    (Endpoint.COMPLETIONS, {"prompt": "x", "stop": ["a", ""]}, "stop"),
    (Endpoint.COMPLETIONS, {"prompt": "x", "n": 2, "stream": True}, "n"),
    (Endpoint.COMPLETIONS, {"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    (Endpoint.COMPLETIONS, {"prompt": "x", "logprobs": 2}, "logprobs"),
    (Endpoint.CHAT, {"messages": []}, "messages"),
    (Endpoint.CHAT, {"messages": [{"role": "robot", "content": "x"}]}, "messages[0]"),
    (Endpoint.CHAT, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    (Endpoint.CHAT, {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools"),
])
def test_bad_requests_name_the_field(endpoint, body, param):
    with pytest.raises(ApiError) as e:
        parse_request(endpoint, body)
    assert e.value.status == 400
    assert e.value.body["error"]["param"] == param
    assert f"'{param}'" in e.value.body["error"]["message"]
