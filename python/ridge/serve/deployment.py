"""ridge.LLM engines as Ray Serve replicas behind one OpenAI-compatible ingress.

    LLMServer      one replica: a ridge.LLM (its own engine, KV cache and prefix cache);
                   parses an OpenAI request body and answers it whole or as SSE events.
    OpenAIIngress  FastAPI: /v1/completions, /v1/chat/completions (stream or not),
                   /v1/models; hands each body to LLMServer through a handle whose
                   router (ridge.serve.router.PrefixRouter) picks the replica by prefix.

Ray's autoscaler adds LLMServer replicas under load and removes them when idle; a replica
being removed gets no new requests and finishes those in flight (streams included) before
it stops, up to graceful_shutdown_timeout_s. build_app() assembles the application.
"""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations (Request) at run time.
import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Dict, Optional, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.handle import DeploymentHandle

import ridge
from ridge.serve.protocol import (SSE_DONE, ApiError, Endpoint, ParsedRequest, chunk_event, completion_body,
                                  parse_request, usage_body, usage_event)
from ridge.serve.router import PrefixRouter

_END = object()


def _error(status: int, message: str, param: Optional[str] = None, code: str = "invalid_value") -> Dict[str, Any]:
    return {"status": status, "body": ApiError(status, message, param, code).body}


class LLMServer:
    """One replica. Requests run on threads of its own pool (the engine releases the GIL
    and batches the calls of all threads together), so max_ongoing_requests of them
    decode in the same steps."""

    def __init__(self, model: str, model_name: str, llm_options: Dict[str, Any], concurrency: int) -> None:
        self.llm = ridge.LLM(model, **llm_options)
        self.model_name = model_name
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        self.fingerprint = f"ridge-{self.replica_id}"
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ridge-replica")

    def _parse(self, body: Any, endpoint: str) -> ParsedRequest:
        req = parse_request(Endpoint(endpoint), body)
        if req.model is not None and req.model != self.model_name:
            raise ApiError(404, f"The model '{req.model}' does not exist (this deployment serves "
                                f"'{self.model_name}')", "model", "model_not_found")
        return req

    def _counters(self) -> Dict[str, str]:
        m = self.llm.metrics()
        return {"x-ridge-replica": self.replica_id, "x-ridge-prefix-cache-hits": str(m["prefix_cache_hits"]),
                "x-ridge-prefix-cache-queries": str(m["prefix_cache_queries"])}

    async def complete(self, body: Any, endpoint: str) -> Dict[str, Any]:
        """The whole response: {"status", "body", "headers"} (headers name the replica and
        its prefix-cache counters after this request)."""
        try:
            req = self._parse(body, endpoint)
            if req.messages is not None:
                run = lambda: self.llm.chat([{"role": r, "content": c} for r, c in req.messages], req.params)
            else:
                prompt: Any = {"prompt_token_ids": req.prompt} if isinstance(req.prompt, list) else req.prompt
                run = lambda: self.llm.generate(prompt, req.params)
            out = (await asyncio.get_running_loop().run_in_executor(self.pool, run))[0]
        except ApiError as e:
            return {"status": e.status, "body": e.body}
        except ridge.InvalidParameterError as e:
            return _error(400, str(e))
        choices = [(c.text, c.finish_reason or "stop") for c in out.outputs]
        usage = usage_body(len(out.prompt_token_ids), sum(len(c.token_ids) for c in out.outputs),
                           out.metrics.num_cached_tokens if out.metrics else 0)
        return {"status": 200, "body": completion_body(req, self.model_name, self.fingerprint, choices, usage),
                "headers": self._counters()}

    async def stream(self, body: Any, endpoint: str) -> AsyncIterator[Union[Dict[str, Any], str]]:
        """First {"status", "headers"} (or {"status", "body"} for an error, and nothing
        more), then the SSE events as strings, those ready together in one string."""
        try:
            req = self._parse(body, endpoint)
            if req.messages is not None:
                ids = self.llm.apply_chat_template([{"role": r, "content": c} for r, c in req.messages])
            else:
                ids = req.prompt if isinstance(req.prompt, list) else self.llm.tokenize(req.prompt)
            tokens = self.llm.stream({"prompt_token_ids": ids}, req.params)
        except ApiError as e:
            yield {"status": e.status, "body": e.body}
            return
        except ridge.InvalidParameterError as e:
            yield _error(400, str(e))
            return
        yield {"status": 200, "headers": {"x-ridge-replica": self.replica_id}}

        loop = asyncio.get_running_loop()
        queue: "asyncio.Queue[Any]" = asyncio.Queue()

        def pump() -> None:
            try:
                for piece in tokens:
                    loop.call_soon_threadsafe(queue.put_nowait, piece)
                loop.call_soon_threadsafe(queue.put_nowait, _END)
            except BaseException as e:  # handed to the event loop, raised there
                loop.call_soon_threadsafe(queue.put_nowait, e)

        loop.run_in_executor(self.pool, pump)
        try:
            events = [chunk_event(req, self.model_name, self.fingerprint, "", first=True)] \
                if req.endpoint is Endpoint.CHAT else []
            done = False
            while not done:
                items = [await queue.get()]
                while not queue.empty():
                    items.append(queue.get_nowait())
                for item in items:
                    if item is _END:
                        done = True
                        break
                    if isinstance(item, BaseException):
                        raise item
                    events.append(chunk_event(req, self.model_name, self.fingerprint, item))
                if not done:
                    yield "".join(events)
                    events = []
            events.append(chunk_event(req, self.model_name, self.fingerprint, None, tokens.finish_reason or "stop"))
            if req.include_usage:
                usage = usage_body(len(ids), len(tokens.token_ids), 0)
                events.append(usage_event(req, self.model_name, self.fingerprint, usage))
            events.append(SSE_DONE)
            yield "".join(events)
        finally:
            tokens.cancel()  # the client went away: free the request's KV blocks

    def metrics(self) -> Dict[str, Any]:
        return {"replica": self.replica_id, **self.llm.metrics()}

    def check_health(self) -> None:
        self.llm.metrics()  # raises once the engine is closed

    def __del__(self) -> None:
        # Ray calls this after the replica has drained its requests.
        llm = getattr(self, "llm", None)
        if llm is not None:
            llm.close()


api = FastAPI(title="ridge.serve")


@serve.ingress(api)
class OpenAIIngress:
    """The one HTTP entry: OpenAI's routes over the LLMServer replicas."""

    def __init__(self, llm: DeploymentHandle, model_name: str) -> None:
        self.llm = llm
        self.model_name = model_name

    @api.get("/v1/models")
    async def models(self) -> Dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": 0,
                                            "owned_by": "ridge"}]}

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> Any:
        return await self._answer(Endpoint.COMPLETIONS, request)

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Any:
        return await self._answer(Endpoint.CHAT, request)

    async def _answer(self, endpoint: Endpoint, request: Request) -> Any:
        try:
            body = await request.json()
        except ValueError as e:
            return JSONResponse(_error(400, f"the request body is not JSON: {e}", None, "invalid_json")["body"], 400)
        if isinstance(body, dict) and body.get("stream") is True:
            events = self.llm.options(stream=True).stream.remote(body, endpoint.value)
            head = await events.__anext__()
            if head["status"] != 200:
                return JSONResponse(head["body"], head["status"])

            async def rest() -> AsyncIterator[str]:
                async for chunk in events:
                    yield chunk

            return StreamingResponse(rest(), media_type="text/event-stream", headers=head["headers"])
        result = await self.llm.complete.remote(body, endpoint.value)
        return JSONResponse(result["body"], result["status"], headers=result.get("headers"))


def build_app(
    model: str,
    *,
    model_name: Optional[str] = None,
    num_replicas: Optional[int] = None,
    min_replicas: int = 1,
    max_replicas: int = 2,
    target_ongoing_requests: float = 4,
    threads: int = 1,
    num_cpus: float = 1,
    max_num_seqs: int = 16,
    n_ctx: int = 2048,
    llm_options: Optional[Dict[str, Any]] = None,
    graceful_shutdown_timeout_s: float = 120,
    block_chars: int = 64,
    imbalance: int = 4,
) -> serve.Application:
    """The application: `serve.run(build_app("gemma3-270m"))` serves it on Ray's HTTP
    port (8000). num_replicas fixes the count; otherwise Ray autoscales between
    min_replicas and max_replicas, aiming at target_ongoing_requests per replica. Each
    replica runs a ridge.LLM with `threads` threads and reserves num_cpus of Ray's CPUs;
    llm_options go to ridge.LLM as they are. block_chars and imbalance tune the prefix
    routing (ridge.serve.affinity)."""
    name = model_name or os.path.basename(os.fspath(model)).removesuffix(".gguf")
    options = {"threads": threads, "max_num_seqs": max_num_seqs, "n_ctx": n_ctx, **(llm_options or {})}
    scaling: Dict[str, Any]
    if num_replicas is not None:
        scaling = {"num_replicas": num_replicas}
    else:
        scaling = {"autoscaling_config": {
            "min_replicas": min_replicas, "max_replicas": max_replicas,
            "target_ongoing_requests": target_ongoing_requests,
            "upscale_delay_s": 5, "downscale_delay_s": 60}}
    server = serve.deployment(LLMServer, name="LLMServer").options(
        ray_actor_options={"num_cpus": num_cpus},
        max_ongoing_requests=max_num_seqs,
        graceful_shutdown_timeout_s=graceful_shutdown_timeout_s,
        graceful_shutdown_wait_loop_s=0.5,
        request_router_config=RequestRouterConfig(
            request_router_class=PrefixRouter,
            request_router_kwargs={"block_chars": block_chars, "imbalance": imbalance}),
        **scaling)
    ingress = serve.deployment(OpenAIIngress, name="OpenAIIngress").options(
        ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
    return ingress.bind(server.bind(os.fspath(model), name, options, max_num_seqs), name)


def app_builder(args: Dict[str, str]) -> serve.Application:
    """For `serve run ridge.serve:app_builder model=gemma3-270m max_replicas=4 ...`: the
    arguments of build_app as key=value strings."""
    args = dict(args)
    if "model" not in args:
        raise ValueError("ridge.serve: app_builder needs model=PATH_OR_NAME")
    kinds = {"num_replicas": int, "min_replicas": int, "max_replicas": int, "target_ongoing_requests": float,
             "threads": int, "num_cpus": float, "max_num_seqs": int, "n_ctx": int,
             "graceful_shutdown_timeout_s": float, "block_chars": int, "imbalance": int, "model_name": str}
    kwargs: Dict[str, Any] = {}
    for key, value in args.items():
        if key == "model":
            continue
        if key not in kinds:
            raise ValueError(f"ridge.serve: unknown argument {key}= (known: model, {', '.join(sorted(kinds))})")
        try:
            kwargs[key] = kinds[key](value)
        except ValueError:
            raise ValueError(f"ridge.serve: {key}={value!r} is not of type {kinds[key].__name__}") from None
    return build_app(args["model"], **kwargs)
