"""ridge: an LLM inference engine for the CPU (GGUF models), driven from Python as vLLM's
offline LLM is.

    import ridge
    llm = ridge.LLM("gemma3-270m")                       # a GGUF path or a fetched model's name
    params = ridge.SamplingParams(temperature=0, max_tokens=32)
    for out in llm.generate(["The capital of France is", "def fib(n):"], params):
        print(out.outputs[0].text)
    for piece in llm.stream("Once upon a time", params):
        print(piece, end="", flush=True)

Errors are ridge.RidgeError (a RuntimeError) with ridge's message; parameters out of range
raise ridge.InvalidParameterError (also a ValueError), a model that cannot be found
ridge.ModelNotFoundError (also a FileNotFoundError). See docs/python.md.
"""

from ridge._ridge import InvalidParameterError, ModelNotFoundError, PerplexityResult, RidgeError, TokenStream
from ridge.llm import LLM, Conversation, PromptType
from ridge.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from ridge.sampling_params import SamplingParams

__version__ = "0.1.0"

__all__ = [
    "LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "RequestMetrics", "Logprob", "PerplexityResult",
    "TokenStream", "RidgeError", "InvalidParameterError", "ModelNotFoundError", "PromptType", "Conversation",
]
