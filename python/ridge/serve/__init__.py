"""ridge.serve: ridge.LLM engines as Ray Serve replicas behind one OpenAI-compatible
ingress, requests that share a prefix routed to the replica that has it cached, replicas
added and removed by Ray's autoscaling without dropping requests in flight. Needs
`pip install "ray[serve]"`. See docs/ray-serve.md.

    from ray import serve
    from ridge.serve import build_app
    serve.run(build_app("gemma3-270m", min_replicas=1, max_replicas=4))
    # then any OpenAI client: base_url="http://HOST:8000/v1", model="gemma3-270m"

or from a shell: `serve run ridge.serve:app_builder model=gemma3-270m max_replicas=4`.
"""

from typing import Any

__all__ = ["build_app", "app_builder", "LLMServer", "OpenAIIngress"]


def __getattr__(name: str) -> Any:
    # Ray is imported on first use, so ridge.serve.affinity and ridge.serve.protocol
    # (plain Python) import without it.
    if name in __all__:
        from ridge.serve import deployment
        return getattr(deployment, name)
    raise AttributeError(f"module 'ridge.serve' has no attribute '{name}'")
