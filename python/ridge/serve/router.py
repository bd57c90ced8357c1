"""PrefixRouter: Ray Serve's request router for the LLMServer deployment, choosing among
the live replicas (Ray hands it the current set as autoscaling adds and removes them) by
prefix affinity (ridge.serve.affinity). It runs in the process of the caller's handle, the
ingress. Ray then sends the request to the first replica of the ranks it returns whose
queue is not full (max_ongoing_requests), so a saturated owner spills to the others.
"""

from __future__ import annotations

from typing import List, Optional

from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica

from ridge.serve.affinity import PrefixAffinity
from ridge.serve.protocol import routing_text


class PrefixRouter(FIFOMixin, RequestRouter):
    def initialize_state(self, block_chars: int = 64, max_blocks: int = 64, imbalance: int = 4, **_: object) -> None:
        # request_router_kwargs of the deployment's RequestRouterConfig.
        self._affinity = PrefixAffinity(block_chars=block_chars, max_blocks=max_blocks, imbalance=imbalance)

    async def choose_replicas(self, candidate_replicas: List[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> List[List[RunningReplica]]:
        if not candidate_replicas:
            return []
        if not hasattr(self, "_affinity"):
            self.initialize_state()
        body = pending_request.args[0] if pending_request is not None and pending_request.args else None
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        cache = self.replica_queue_len_cache
        load = {rid: cache.get(r.replica_id) or 0 for rid, r in by_id.items()}
        order = self._affinity.choose(routing_text(body), list(by_id), load)
        return [[by_id[rid]] for rid in order]
