"""How each prompt is sampled: vLLM's SamplingParams, in the fields ridge's sampler has
(src/engine/sampler.h gives the chain: penalties, top-k, top-p, min-p, temperature)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Union

from ridge._ridge import InvalidParameterError


_INT32_MAX = 2**31 - 1
# Completions per prompt: each is a request of its own, all queued at once.
_MAX_N = 4096


@dataclass
class SamplingParams:
    """vLLM's names and defaults: temperature 1 samples the model's distribution as it
    is; temperature 0 is greedy. Ranges the engine checks (top_p in [0, 1], ...) raise
    ridge.InvalidParameterError when the request is submitted."""

    n: int = 1                      # completions per prompt (seeds as the server's `n`)
    temperature: float = 1.0        # <= 0: greedy
    top_p: float = 1.0              # 1: off
    top_k: int = 0                  # 0 or -1: off
    min_p: float = 0.0              # 0: off
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64         # tokens the penalties look back over; -1: all
    seed: Optional[int] = None      # None: a random seed per request
    stop: Optional[Union[str, List[str]]] = None  # text ends before the first match
    max_tokens: Optional[int] = 16  # None: as many as the context allows
    ignore_eos: bool = False
    logprobs: Optional[int] = None  # the chosen token's logprob and this many alternatives

    def __post_init__(self) -> None:
        def bad(message: str) -> InvalidParameterError:
            return InvalidParameterError(f"SamplingParams: {message}")

        def integer(value: object, low: int, high: int = _INT32_MAX) -> bool:
            return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

        if not integer(self.n, 1, _MAX_N):
            raise bad(f"n must be an integer in [1, {_MAX_N}], got {self.n!r}")
        if self.max_tokens is not None and not integer(self.max_tokens, 1):
            raise bad(f"max_tokens must be an integer in [1, 2**31), or None for up to the context; "
                      f"got {self.max_tokens!r}")
        if self.logprobs is not None and not integer(self.logprobs, 0):
            raise bad(f"logprobs must be an integer >= 0, or None; got {self.logprobs!r}")
        if not integer(self.top_k, -1):
            raise bad(f"top_k must be an integer in [0, 2**31) (0 or -1: off), got {self.top_k!r}")
        if not integer(self.repeat_last_n, -1):
            raise bad(f"repeat_last_n must be an integer in [0, 2**31) (-1: all), got {self.repeat_last_n!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or not 0 <= self.seed < 2**64):
            raise bad(f"seed must be an integer in [0, 2**64), or None; got {self.seed!r}")
        if not all(isinstance(s, str) and s for s in self.stop_strings()):
            raise bad(f"stop must be a non-empty string or a list of them, got {self.stop!r}")

    def stop_strings(self) -> List[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)
