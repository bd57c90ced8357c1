"""`ridge serve`'s /tokenize, /detokenize (llama-server's shapes) and /v1/embeddings
(OpenAI's), over real HTTP with `requests` and the official `openai` client.

stories260K (fast) carries the contract and an independent check: its embedding is the
mean of the numpy reference forward's final hidden states (reference_forward.py), unit
length, to float tolerance. qwen2.5-coder-0.5b, when cached, gives a weak but real semantic
check: related sentences lie closer than unrelated ones.
"""

import base64
import math

import numpy as np
import pytest

from test_server_api import STORIES, RidgeServer, cached_model, openai_client

requests = pytest.importorskip("requests")


@pytest.fixture(scope="module")
def stories():
    # f32 KV: the reference comparison then measures the forward pass, not f16 rounding.
    with RidgeServer(STORIES, "--parallel", 4, "-c", 256, "--max-batch-tokens", 32, "--kv-type", "f32",
                     "--alias", "stories") as server:
        yield server


@pytest.fixture(scope="module")
def qwen():
    path = cached_model("qwen2.5-coder-0.5b")
    if path is None:
        pytest.skip("qwen2.5-coder-0.5b is not in the model cache")
    with RidgeServer(path, "--parallel", 4, "-c", 512, "--alias", "qwen") as server:
        yield server


def post(server, path, body, **kwargs):
    return requests.post(server.base_url + path, json=body, timeout=120, **kwargs)


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / (norm(a) * norm(b))


# ---------------------------------------------------------------- /tokenize, /detokenize

TEXTS = ["Once upon a time, there was a little dog.", "Lily said: \"Hello!\"\n\nBen   laughed.", "x"]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_detokenize_round_trip(stories, text):
    r = post(stories, "/tokenize", {"content": text})
    assert r.status_code == 200, r.text
    tokens = r.json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    r = post(stories, "/detokenize", {"tokens": tokens})
    assert r.status_code == 200, r.text
    assert r.json() == {"content": text}


def test_tokenize_add_special_and_pieces(stories):
    plain = post(stories, "/tokenize", {"content": "The dog"}).json()["tokens"]
    special = post(stories, "/tokenize", {"content": "The dog", "add_special": True}).json()["tokens"]
    assert special[1:] == plain and special[0] == 1  # stories260K's BOS
    pieces = post(stories, "/tokenize", {"content": "The dog", "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == plain
    # SentencePiece: the dummy-prefix space is part of the first piece.
    assert "".join(p["piece"] for p in pieces) == " The dog"


def test_tokenize_pieces_join_to_the_text_with_byte_lists(qwen):
    text = "def f(x):\n    return x * 2  # 媽 and 🤗"
    r = post(qwen, "/tokenize", {"content": text, "with_pieces": True})
    assert r.status_code == 200, r.text
    joined, saw_bytes = b"", False
    for t in r.json()["tokens"]:
        piece = t["piece"]
        if isinstance(piece, list):  # not valid UTF-8 on its own: its byte values
            saw_bytes = True
            assert all(isinstance(b, int) and 0 <= b < 256 for b in piece)
            joined += bytes(piece)
        else:
            joined += piece.encode()
    assert joined.decode() == text
    assert saw_bytes
    ids = [t["id"] for t in r.json()["tokens"]]
    assert post(qwen, "/tokenize", {"content": text}).json()["tokens"] == ids
    assert post(qwen, "/detokenize", {"tokens": ids}).json()["content"] == text


def test_tokenize_special_tokens_parsed_or_not(qwen):
    parsed = post(qwen, "/tokenize", {"content": "<|im_start|>user"}).json()["tokens"]
    literal = post(qwen, "/tokenize", {"content": "<|im_start|>user", "parse_special": False}).json()["tokens"]
    assert len(parsed) < len(literal)
    assert post(qwen, "/detokenize", {"tokens": parsed}).json()["content"] == "<|im_start|>user"


def test_tokenize_errors(stories):
    r = post(stories, "/tokenize", {})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "content" and err["code"] == "missing_required_parameter"
    assert err["type"] == "invalid_request_error"
    assert post(stories, "/tokenize", {"content": ["a"]}).json()["error"]["param"] == "content"
    r = post(stories, "/detokenize", {"tokens": [1, 99999, -1]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "tokens" and err["code"] == "invalid_value"
    assert "tokens[1] = 99999" in err["message"] and "tokens[2] = -1" in err["message"]
    assert post(stories, "/detokenize", {"tokens": [1, "a"]}).json()["error"]["param"] == "tokens[1]"


def test_api_key_guards_tokenize_too():
    with RidgeServer(STORIES, "--api-key", "s3cret", "-c", 128) as server:
        for path, body in [("/tokenize", {"content": "hi"}), ("/detokenize", {"tokens": [1]}),
                           ("/v1/embeddings", {"input": "hi"})]:
            r = post(server, path, body)
            assert r.status_code == 401, path
            assert r.json()["error"]["code"] == "missing_api_key"
            r = post(server, path, body, headers={"Authorization": "Bearer s3cret"})
            assert r.status_code == 200, (path, r.text)
        assert requests.get(server.base_url + "/health", timeout=10).status_code == 200


# ---------------------------------------------------------------- /v1/embeddings

def test_embeddings_openai_client_shape_and_unit_norm(stories):
    client = openai_client(stories)
    out = client.embeddings.create(model="stories", input=["Once upon a time", "The dog ran."])
    assert len(out.data) == 2 and [d.index for d in out.data] == [0, 1]
    assert out.model == "stories"
    for d in out.data:
        assert d.object == "embedding"
        assert len(d.embedding) == 64  # stories260K's n_embd
        assert abs(norm(d.embedding) - 1) < 1e-5
    n_tokens = sum(len(post(stories, "/tokenize", {"content": t, "add_special": True}).json()["tokens"])
                   for t in ["Once upon a time", "The dog ran."])
    assert out.usage.prompt_tokens == n_tokens and out.usage.total_tokens == n_tokens


def test_embeddings_same_alone_and_batched(stories):
    client = openai_client(stories)
    texts = ["Lily and Ben went to the park. They played all day and were very happy together.",
             "The dog", "Tom had a red ball.", "Sue"]
    alone = [client.embeddings.create(model="stories", input=t).data[0].embedding for t in texts]
    batched = [d.embedding for d in client.embeddings.create(model="stories", input=texts).data]
    for a, b in zip(alone, batched):
        assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-6


def test_embeddings_token_inputs_and_base64(stories):
    text = "Once upon a time"
    ids = post(stories, "/tokenize", {"content": text, "add_special": True}).json()["tokens"]
    by_text = post(stories, "/v1/embeddings", {"input": text}).json()["data"][0]["embedding"]
    by_ids = post(stories, "/v1/embeddings", {"input": ids}).json()["data"][0]["embedding"]
    by_lists = post(stories, "/v1/embeddings", {"input": [ids, ids[:2]]}).json()["data"]
    assert by_ids == by_text and by_lists[0]["embedding"] == by_text and len(by_lists) == 2
    r = post(stories, "/v1/embeddings", {"input": text, "encoding_format": "base64"})
    assert r.status_code == 200, r.text
    decoded = np.frombuffer(base64.b64decode(r.json()["data"][0]["embedding"]), dtype="<f4")
    assert decoded.tolist() == by_text
    # The openai client asks for base64 by default and decodes it itself.
    got = openai_client(stories).embeddings.create(model="stories", input=text).data[0].embedding
    assert got == by_text


def test_embeddings_errors(stories):
    openai = pytest.importorskip("openai")
    client = openai_client(stories)
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="stories", input="hi", dimensions=32)
    assert e.value.body["param"] == "dimensions"
    assert client.embeddings.create(model="stories", input="hi", dimensions=64).data[0].embedding
    for body, param in [({"input": ""}, "input"), ({"input": []}, "input"), ({"input": ["a", ""]}, "input"),
                        ({}, "input"), ({"input": [1, 99999]}, "input"),
                        ({"input": "a", "encoding_format": "int8"}, "encoding_format")]:
        r = post(stories, "/v1/embeddings", body)
        assert r.status_code == 400, body
        assert r.json()["error"]["param"] == param, (body, r.json())
    r = post(stories, "/v1/embeddings", {"input": [1] * 300})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = post(stories, "/v1/embeddings", {"input": "hi", "model": "other"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_embedding_matches_the_numpy_reference(stories):
    """Mean of the reference's final hidden states (after the output norm), normalised."""
    ref = pytest.importorskip("reference_forward")
    model = ref.load(str(STORIES))
    for text in ["Once upon a time, there was a little girl named Lily.", "The dog"]:
        ids = post(stories, "/tokenize", {"content": text, "add_special": True}).json()["tokens"]
        want = model.hidden(ids).mean(axis=0)
        want /= np.linalg.norm(want)
        got = np.array(post(stories, "/v1/embeddings", {"input": text}).json()["data"][0]["embedding"])
        assert np.max(np.abs(got - want)) < 1e-6, np.max(np.abs(got - want))  # measured 7e-8


def test_embeddings_related_sentences_are_closer(qwen):
    client = openai_client(qwen)
    texts = ["How do I sort a list in Python?",
             "What is the way to order the elements of a Python list?",
             "The weather in the mountains was cold and snowy last winter."]
    a, b, c = [d.embedding for d in client.embeddings.create(model="qwen", input=texts).data]
    assert len(a) == 896  # qwen2.5-0.5b's n_embd
    assert cosine(a, b) > cosine(a, c) and cosine(a, b) > cosine(b, c), (cosine(a, b), cosine(a, c), cosine(b, c))
