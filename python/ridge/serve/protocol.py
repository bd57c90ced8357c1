"""The OpenAI API's request and response bodies for ridge.serve, without Ray or a model:
a request body becomes a ParsedRequest (the prompt or conversation, SamplingParams, the
streaming options), checked field by field as `ridge serve` checks them
(src/server/openai_request.cpp); engine results become the JSON bodies and SSE chunks the
official `openai` client reads.

    req = parse_request(Endpoint.CHAT, {"messages": [{"role": "user", "content": "Hi"}]})
    body = completion_body(req, "gemma3-270m", "ridge-abc", [("Hello!", "stop")], usage)
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ridge.sampling_params import SamplingParams

MAX_CHOICES = 16  # `n`, as `ridge serve` caps it


class Endpoint(Enum):
    COMPLETIONS = "/v1/completions"
    CHAT = "/v1/chat/completions"


class ApiError(Exception):
    """A request the API refuses: the HTTP status and OpenAI's error object."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 code: Optional[str] = "invalid_value", type_: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": type_, "param": param, "code": code}}


@dataclass
class ParsedRequest:
    """One validated request. Exactly one of prompt and messages is set."""

    endpoint: Endpoint
    params: SamplingParams
    prompt: Optional[Union[str, List[int]]] = None
    messages: Optional[List[Tuple[str, str]]] = None  # (role, content)
    stream: bool = False
    include_usage: bool = False
    model: Optional[str] = None
    request_id: str = field(default_factory=lambda: secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))


def _wrong_type(name: str, expected: str, value: Any) -> ApiError:
    return ApiError(400, f"'{name}' must be {expected}, got {json.dumps(value)[:80]}", name, "invalid_type")


def _number(body: Mapping[str, Any], name: str, default: float, low: float, high: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _wrong_type(name, "a number", v)
    if not low <= v <= high:
        raise ApiError(400, f"'{name}' must be in [{low}, {high}], got {v}", name)
    return float(v)


def _integer(body: Mapping[str, Any], name: str, low: int, high: int) -> Optional[int]:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _wrong_type(name, "an integer", v)
    if not low <= v <= high:
        raise ApiError(400, f"'{name}' must be in [{low}, {high}], got {v}", name)
    return v


def _stop(body: Mapping[str, Any]) -> Optional[List[str]]:
    s = body.get("stop")
    if s is None:
        return None
    stops = [s] if isinstance(s, str) else s
    if not isinstance(stops, list) or not all(isinstance(x, str) for x in stops):
        raise _wrong_type("stop", "a string or an array of strings", s)
    if len(stops) > 4 or any(not x for x in stops):
        raise ApiError(400, "'stop' takes at most 4 non-empty strings", "stop")
    return stops or None


def _prompt(body: Mapping[str, Any]) -> Union[str, List[int]]:
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]  # the openai client's list of one prompt
    if isinstance(p, str):
        return p
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in p):
        return list(p)
    raise _wrong_type("prompt", "a string or an array of token ids (one prompt per request)", p)


def _messages(body: Mapping[str, Any]) -> List[Tuple[str, str]]:
    ms = body.get("messages")
    if not isinstance(ms, list) or not ms:
        raise _wrong_type("messages", "a non-empty array of messages", ms)
    out = []
    for i, m in enumerate(ms):
        name = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant"):
            raise ApiError(400, f"'{name}' needs a 'role' of system, developer, user or assistant", name)
        content = m.get("content")
        if isinstance(content, list):  # content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise _wrong_type(f"{name}.content", "a string or an array of text parts", content)
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise _wrong_type(f"{name}.content", "a string or an array of text parts", content)
        out.append(("system" if m["role"] == "developer" else m["role"], content))
    return out


def parse_request(endpoint: Endpoint, body: Any) -> ParsedRequest:
    """The request of one POST body, or ApiError naming the field that is wrong."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", None)
    for unsupported in ("logprobs", "top_logprobs", "tools", "response_format", "suffix", "echo", "best_of"):
        value = body.get(unsupported)
        if value is not None and value is not False and value != [] and value != "" and not (
                unsupported == "best_of" and value == 1):
            raise ApiError(400, f"'{unsupported}' is not supported by ridge.serve (use `ridge serve` for it)",
                           unsupported, "unsupported_parameter")
    max_name = "max_completion_tokens" if (endpoint is Endpoint.CHAT and body.get("max_completion_tokens")
                                           is not None) else "max_tokens"
    max_tokens = _integer(body, max_name, 1, 1 << 30)
    if max_tokens is None and endpoint is Endpoint.COMPLETIONS:
        max_tokens = 16  # OpenAI's default for /v1/completions; chat runs up to the context
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise _wrong_type("stream", "a boolean", stream)
    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise ApiError(400, "'stream_options' is only allowed when 'stream' is enabled", "stream_options")
        if not isinstance(options, dict):
            raise _wrong_type("stream_options", "an object", options)
        include_usage = bool(options.get("include_usage", False))
    n = _integer(body, "n", 1, MAX_CHOICES) or 1
    if stream and n != 1:
        raise ApiError(400, "'n' must be 1 when streaming with ridge.serve", "n")
    seed = _integer(body, "seed", -(1 << 63), (1 << 63) - 1)
    ignore_eos = body.get("ignore_eos") or False  # vLLM's extension: run to max_tokens
    if not isinstance(ignore_eos, bool):
        raise _wrong_type("ignore_eos", "a boolean", ignore_eos)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _wrong_type("model", "a string", model)
    params = SamplingParams(
        n=n, max_tokens=max_tokens, stop=_stop(body),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        top_k=_integer(body, "top_k", -1, 1 << 20) or 0,
        min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 0.0, 10.0),
        seed=None if seed is None else seed % (1 << 64), ignore_eos=ignore_eos)
    req = ParsedRequest(endpoint=endpoint, params=params, stream=stream, include_usage=include_usage, model=model)
    if endpoint is Endpoint.CHAT:
        req.messages = _messages(body)
    else:
        req.prompt = _prompt(body)
    return req


def routing_text(body: Any) -> str:
    """The text whose leading characters decide the replica (ridge.serve.routing): the
    prompt, or the conversation's messages in order, so requests that share a system
    prompt or earlier turns share a leading string. Malformed bodies give "" (the replica
    refuses them)."""
    if not isinstance(body, dict):
        return ""
    if isinstance(body.get("messages"), list):
        parts = []
        for m in body["messages"]:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(f"<{m.get('role') if isinstance(m, dict) else ''}>{content if isinstance(content, str) else ''}")
        return "".join(parts)
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]
    if isinstance(p, list):
        return ",".join(str(t) for t in p)  # token ids: the same ids, the same text
    return p if isinstance(p, str) else ""


# --- responses ---------------------------------------------------------------------------

def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> Dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def _head(req: ParsedRequest, model: str, fingerprint: str, chunk: bool) -> Dict[str, Any]:
    if req.endpoint is Endpoint.CHAT:
        return {"id": f"chatcmpl-{req.request_id}", "object": "chat.completion.chunk" if chunk else "chat.completion",
                "created": req.created, "model": model, "system_fingerprint": fingerprint}
    return {"id": f"cmpl-{req.request_id}", "object": "text_completion", "created": req.created, "model": model,
            "system_fingerprint": fingerprint}


def completion_body(req: ParsedRequest, model: str, fingerprint: str, choices: Sequence[Tuple[str, str]],
                    usage: Dict[str, Any]) -> Dict[str, Any]:
    """The whole response: choices are (text, finish_reason) in index order."""
    body = _head(req, model, fingerprint, chunk=False)
    if req.endpoint is Endpoint.CHAT:
        body["choices"] = [{"index": i, "message": {"role": "assistant", "content": text}, "logprobs": None,
                            "finish_reason": reason} for i, (text, reason) in enumerate(choices)]
    else:
        body["choices"] = [{"index": i, "text": text, "logprobs": None, "finish_reason": reason}
                           for i, (text, reason) in enumerate(choices)]
    body["usage"] = usage
    return body


def chunk_event(req: ParsedRequest, model: str, fingerprint: str, text: Optional[str],
                finish_reason: Optional[str] = None, first: bool = False) -> str:
    """One SSE event of a stream: a piece of text, or (text None) the finishing chunk."""
    body = _head(req, model, fingerprint, chunk=True)
    if req.endpoint is Endpoint.CHAT:
        delta: Dict[str, Any] = {} if text is None else {"content": text}
        if first:
            delta["role"] = "assistant"
        choice: Dict[str, Any] = {"index": 0, "delta": delta}
    else:
        choice = {"index": 0, "text": text or ""}
    choice.update({"logprobs": None, "finish_reason": finish_reason})
    body["choices"] = [choice]
    if req.include_usage:
        body["usage"] = None
    return sse(body)


def usage_event(req: ParsedRequest, model: str, fingerprint: str, usage: Dict[str, Any]) -> str:
    """The last chunk when stream_options.include_usage is set: no choices, the usage."""
    body = _head(req, model, fingerprint, chunk=True)
    body["choices"] = []
    body["usage"] = usage
    return sse(body)


def sse(body: Any) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


SSE_DONE = "data: [DONE]\n\n"
