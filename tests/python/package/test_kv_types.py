"""The KV cache's element type through the package: where the cache is the only
difference (stories260K: F32 weights, so its matmuls run in f32), the f16 cache's greedy
text is the f32 cache's. (Moved from test_kv_f16.py, which keeps the CLI's figures: the
bytes per token, the KL divergence, the errors.)"""

from __future__ import annotations

import ridge
from test_cli import STORIES

PROMPTS = ["Once upon a time", "The little dog saw a big red ball and"]


def test_f16_cache_greedy_text_is_the_f32_caches_with_f32_matmuls():
    params = ridge.SamplingParams(temperature=0, max_tokens=32)
    texts = {}
    for kv_type in ("f16", "f32"):
        with ridge.LLM(STORIES, kv_type=kv_type, threads=2) as llm:
            texts[kv_type] = [o.outputs[0].text for o in llm.generate(PROMPTS, params)]
    assert texts["f16"] == texts["f32"]
    assert all(texts["f16"])
