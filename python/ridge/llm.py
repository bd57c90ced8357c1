"""ridge.LLM: a model and its continuously batching engine, driven as vLLM's offline LLM.

    llm = ridge.LLM("gemma3-270m")
    outs = llm.generate(["The capital of France is", "def fib(n):"], ridge.SamplingParams(temperature=0, max_tokens=32))
    print(outs[0].outputs[0].text)
"""

from __future__ import annotations

import itertools
import os
import secrets
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, cast

from ridge import _ridge
from ridge._ridge import InvalidParameterError, PerplexityResult, TokenStream
from ridge.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from ridge.sampling_params import SamplingParams

# A prompt: text (tokenized as `ridge run -p` does: BOS where the model adds one, special
# tokens' text parsed), token ids, or vLLM's {"prompt": ...} / {"prompt_token_ids": ...}.
PromptType = Union[str, Sequence[int], Mapping[str, Any]]
# A conversation: {"role": "system" | "user" | "assistant", "content": str} messages.
Conversation = Sequence[Mapping[str, str]]

_request_ids = itertools.count()


class LLM:
    """One model and its engine. Calls from several threads share the engine's batches.

    model: a GGUF path or a fetched model's short name (scripts/fetch-models).
    n_ctx: context per request (0: the model's, capped at 8192). threads: 0 for all cores.
    max_num_seqs: sequences decoded together. max_batch_tokens: tokens one step computes.
    kv_type: f16, f32, bf16, q8_0 or q4_0. kv_budget_mib: KV cache memory (0: max_num_seqs
    full contexts, capped at 1 GiB). weights: as-stored, nf4 or int8 (converted at load).
    spec: speculative decoding, "ngram" (prompt lookup) or "draft" with draft=MODEL.
    """

    def __init__(
        self,
        model: Union[str, "os.PathLike[str]"],
        *,
        n_ctx: int = 0,
        threads: int = 0,
        max_num_seqs: int = 16,
        max_batch_tokens: int = 512,
        kv_type: str = "f16",
        kv_budget_mib: float = 0,
        weights: str = "as-stored",
        spec: Optional[str] = None,
        draft: Optional[Union[str, "os.PathLike[str]"]] = None,
        draft_max: int = 8,
        prefix_cache: bool = True,
    ) -> None:
        self._engine = _ridge.Engine(
            os.fspath(model), threads=threads, n_ctx=n_ctx, max_num_seqs=max_num_seqs,
            max_batch_tokens=max_batch_tokens, kv_budget_mib=kv_budget_mib, kv_type=kv_type, weights=weights,
            spec=spec or "none", draft=os.fspath(draft) if draft is not None else "", draft_max=draft_max,
            prefix_cache=prefix_cache)

    # --- generation ------------------------------------------------------------------

    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
    ) -> List[RequestOutput]:
        """Runs every prompt through the engine at once (continuous batching) and returns
        their outputs in order. One SamplingParams for all, or one per prompt."""
        items = [self._prompt(p) for p in _as_list(prompts)]
        return self._run(items, sampling_params)

    def chat(
        self,
        messages: Union[Conversation, Sequence[Conversation]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        *,
        add_generation_prompt: bool = True,
    ) -> List[RequestOutput]:
        """Generates the assistant's reply to each conversation, in the model's chat
        template (as `ridge serve`'s /v1/chat/completions formats it)."""
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
            raise InvalidParameterError("chat: messages must be a conversation (a list of {'role', 'content'} dicts) "
                                        "or a list of conversations")
        conversations = [messages] if isinstance(messages[0], Mapping) else list(messages)
        items: List[Tuple[Optional[str], List[int]]] = [
            (None, self._engine.chat_prompt(_chat_pairs(c), add_generation_prompt)) for c in conversations]
        return self._run(items, sampling_params)

    def apply_chat_template(self, messages: Conversation, *, add_generation_prompt: bool = True) -> List[int]:
        """The token ids chat() would give the engine for this conversation (to stream a
        reply: stream({"prompt_token_ids": ids}))."""
        return self._engine.chat_prompt(_chat_pairs(messages), add_generation_prompt)

    def stream(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None) -> TokenStream:
        """Yields the completion's text in pieces as the engine produces them. After the
        end, .finish_reason and .token_ids tell how it ended; .cancel() (or dropping the
        stream) stops the request."""
        params = sampling_params or SamplingParams()
        if params.n != 1:
            raise InvalidParameterError("stream: SamplingParams.n must be 1")
        _, ids = self._prompt(prompt)
        return self._engine.stream(_request(ids, params, _base_seed(params), 0))

    # --- tokens, scores, state -------------------------------------------------------

    def tokenize(self, text: str, *, add_special_tokens: bool = True, parse_special: bool = True) -> List[int]:
        """Token ids of the text: BOS first where the model adds one (add_special_tokens),
        special tokens' text ("<start_of_turn>") as those tokens (parse_special)."""
        return self._engine.encode(text, add_special_tokens, parse_special)

    def detokenize(self, token_ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return self._engine.decode(list(token_ids), not skip_special_tokens)

    def perplexity(self, text: str, *, n_ctx: int = 512, chunks: Optional[int] = None) -> PerplexityResult:
        """Perplexity as `ridge perplexity -c N_CTX [--chunks CHUNKS]` (and llama.cpp's
        llama-perplexity) computes it: windows of n_ctx tokens, the second half of each
        scored, run side by side on this engine. The text needs 2 * n_ctx tokens."""
        return self._engine.perplexity(text, n_ctx, -1 if chunks is None else chunks)

    def metrics(self) -> Dict[str, int]:
        """The engine's counters: requests running and waiting, KV blocks, tokens."""
        return self._engine.metrics()

    @property
    def n_ctx(self) -> int:
        """Prompt and completion tokens one request may hold."""
        return self._engine.n_ctx

    @property
    def model_path(self) -> str:
        return self._engine.model_path

    def close(self) -> None:
        """Stops the engine and frees the model (waiting for calls on other threads)."""
        self._engine.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        try:
            return f"LLM({self._engine.description})"
        except _ridge.RidgeError:
            return "LLM(closed)"

    # --- internals -------------------------------------------------------------------

    def _prompt(self, prompt: PromptType) -> Tuple[Optional[str], List[int]]:
        if isinstance(prompt, Mapping):
            if "prompt_token_ids" in prompt:
                return None, _token_ids(prompt["prompt_token_ids"])
            if "prompt" in prompt:
                prompt = prompt["prompt"]
            else:
                raise InvalidParameterError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
        if isinstance(prompt, str):
            return prompt, self._engine.encode(prompt, True, True)
        return None, _token_ids(prompt)

    def _run(self, items: List[Tuple[Optional[str], List[int]]],
             sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]]) -> List[RequestOutput]:
        if sampling_params is None:
            params = [SamplingParams()] * len(items)
        elif isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(items)
        else:
            params = list(sampling_params)
            if len(params) != len(items):
                raise InvalidParameterError(f"{len(params)} SamplingParams for {len(items)} prompts")
        requests: List[_ridge.Request] = []
        for (_, ids), p in zip(items, params):
            seed = _base_seed(p)
            requests.extend(_request(ids, p, seed, j) for j in range(p.n))
        completions = iter(self._engine.generate(requests))
        outputs = []
        for (text, ids), p in zip(items, params):
            done = [next(completions) for _ in range(p.n)]
            outputs.append(RequestOutput(
                request_id=str(next(_request_ids)), prompt=text, prompt_token_ids=ids,
                outputs=[self._completion(j, c, p) for j, c in enumerate(done)], finished=True,
                metrics=_metrics(done[0])))
        return outputs

    def _completion(self, index: int, c: _ridge.Completion, p: SamplingParams) -> CompletionOutput:
        logprobs = None
        cumulative = None
        if p.logprobs is not None:
            chosen = c.logprobs
            cumulative = float(sum(chosen))
            top = c.top_logprobs if p.logprobs > 0 else [[] for _ in chosen]
            logprobs = []
            for token, lp, alternatives in zip(c.tokens, chosen, top):
                entry = {t: Logprob(v, rank, self._engine.decode([t], True))
                         for rank, (t, v) in enumerate(alternatives, start=1)}
                if token not in entry:
                    entry[token] = Logprob(lp, None, self._engine.decode([token], True))
                logprobs.append(entry)
        return CompletionOutput(index=index, text=c.text, token_ids=c.tokens, cumulative_logprob=cumulative,
                                logprobs=logprobs, finish_reason=c.finish_reason)


def _as_list(prompts: Union[PromptType, Sequence[PromptType]]) -> List[PromptType]:
    if isinstance(prompts, (bytes, bytearray)):  # else a list of ints: token ids
        raise InvalidParameterError(f"a prompt must be text (str) or token ids, got bytes {prompts!r:.60}: "
                                    "decode them first")
    if isinstance(prompts, (str, Mapping)):
        return [prompts]
    items = list(prompts)
    if items and all(isinstance(p, int) for p in items):
        return [cast(Sequence[int], items)]  # one prompt of token ids
    return cast(List[PromptType], items)


def _token_ids(ids: Any) -> List[int]:
    if isinstance(ids, (str, bytes, bytearray)) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise InvalidParameterError(f"a prompt must be text or a list of token ids, got {ids!r:.80}")
    for i, t in enumerate(ids):
        if not -2**31 <= t < 2**31:  # the engine names ids outside the vocabulary; these do not fit its int32
            raise InvalidParameterError(f"prompt: token {i} is {t}, outside the vocabulary")
    return list(ids)


def _chat_pairs(conversation: Any) -> List[Tuple[str, str]]:
    pairs = []
    for i, m in enumerate(conversation):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise InvalidParameterError(f"chat: message {i} must be a dict with 'role' and 'content' strings, "
                                        f"got {m!r:.80}")
        pairs.append((m["role"], m["content"]))
    return pairs


def _base_seed(p: SamplingParams) -> int:
    return p.seed if p.seed is not None else secrets.randbits(64)


def _request(ids: List[int], p: SamplingParams, seed: int, index: int) -> _ridge.Request:
    s = _ridge.Sampling()
    s.temperature = p.temperature
    s.top_k = max(p.top_k, 0)  # vLLM's -1 is ridge's 0: off
    s.top_p = p.top_p
    s.min_p = p.min_p
    s.repetition_penalty = p.repetition_penalty
    s.presence_penalty = p.presence_penalty
    s.frequency_penalty = p.frequency_penalty
    s.repeat_last_n = p.repeat_last_n
    s.seed = _ridge.choice_seed(seed, index)
    s.logprobs = p.logprobs is not None
    s.n_logprobs = p.logprobs or 0
    r = _ridge.Request()
    r.prompt = ids
    r.max_tokens = p.max_tokens or 0  # 0: up to the context
    r.sampling = s
    r.stop = p.stop_strings()
    r.ignore_eos = p.ignore_eos
    return r


def _metrics(c: _ridge.Completion) -> RequestMetrics:
    return RequestMetrics(
        time_to_first_token=c.first_token_seconds if c.tokens else None, total_time=c.total_seconds,
        num_prompt_tokens=c.prompt_tokens, num_cached_tokens=c.cached_prompt_tokens,
        num_generated_tokens=len(c.tokens), spec_draft_tokens=c.spec_drafted, spec_accepted_tokens=c.spec_accepted)


__all__ = ["LLM", "PromptType", "Conversation"]
