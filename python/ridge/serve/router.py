"""PrefixRouter: Ray Serve's request router for the LLMServer deployment, choosing among
the live replicas (Ray hands it the current set as autoscaling adds and removes them) by
prefix affinity (ridge.serve.affinity). It runs in the process of the caller's handle, the
ingress.

Ray sends a request to a replica of the first rank returned that answers its queue-length
probe in time and has room (below max_ongoing_requests), and asks again when none does.
So the router offers the preferred replica alone for the first few tries (a probe that
times out on a busy machine must not scatter a prefix), and every replica, best first,
once the preferred one is known full or has not taken the request after those tries.
No FIFOMixin: it would hand the replica chosen for one request to whichever request
waits longest, and the choice is per request.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, List, Optional

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from ridge.serve.affinity import PrefixAffinity
from ridge.serve.protocol import routing_text

AFFINITY_TRIES = 5  # probe deadlines 0.1, 0.2, 0.4, 0.8, 1 s: about 2.5 s before spilling


class PrefixRouter(RequestRouter):
    def initialize_state(self, block_chars: int = 64, max_blocks: int = 64, imbalance: int = 4, **_: object) -> None:
        # request_router_kwargs of the deployment's RequestRouterConfig.
        self._affinity = PrefixAffinity(block_chars=block_chars, max_blocks=max_blocks, imbalance=imbalance)
        self._tries: "OrderedDict[str, int]" = OrderedDict()  # request id -> routing attempts so far

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
        order = [by_id[rid] for rid in self._affinity.choose(routing_text(body), list(by_id), load)]
        first = order[0]
        tries = self._count_try(pending_request)
        if tries <= AFFINITY_TRIES and load[first.replica_id.unique_id] < first.max_ongoing_requests:
            return [[first]]
        return [[r] for r in order]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        self._tries.pop(_request_id(pending_request), None)

    def _count_try(self, pending_request: Optional[PendingRequest]) -> int:
        key = _request_id(pending_request)
        if key is None:
            return 1
        self._tries[key] = self._tries.get(key, 0) + 1
        self._tries.move_to_end(key)
        while len(self._tries) > 4096:  # requests cancelled before routing
            self._tries.popitem(last=False)
        return self._tries[key]


def _request_id(pending_request: Optional[PendingRequest]) -> Optional[str]:
    metadata = getattr(pending_request, "metadata", None)
    return getattr(metadata, "internal_request_id", None)
