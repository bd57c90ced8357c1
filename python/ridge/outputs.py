"""What generate and chat return: vLLM's RequestOutput and CompletionOutput, with
ridge's timings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional


@dataclass
class Logprob:
    """One token's log-probability (of the distribution after penalties, before top-k,
    top-p, min-p and temperature, as OpenAI reports them)."""

    logprob: float
    rank: Optional[int] = None           # 1: the most likely token; None: outside the alternatives asked for
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    index: int                       # which of the prompt's n completions
    text: str
    token_ids: List[int]             # generated tokens (an end-of-generation token included)
    cumulative_logprob: Optional[float]  # when logprobs were asked for
    logprobs: Optional[List[Dict[int, Logprob]]]  # per token: the chosen one and the alternatives
    finish_reason: Optional[str]     # "stop" (end of generation or a stop string) or "length"

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    time_to_first_token: Optional[float]  # seconds from submission; None: no token generated
    total_time: float                     # seconds from submission to the last token
    num_prompt_tokens: int
    num_cached_tokens: int                # prompt tokens served from the prefix cache
    num_generated_tokens: int
    spec_draft_tokens: int = 0            # speculative decoding: drafted, and accepted
    spec_accepted_tokens: int = 0


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]            # None when the prompt was given as token ids
    prompt_token_ids: List[int]
    outputs: List[CompletionOutput]
    finished: bool
    metrics: Optional[RequestMetrics]  # of the first completion (outputs[0])
