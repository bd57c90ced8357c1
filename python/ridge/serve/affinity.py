"""Prefix affinity: which replica a prompt goes to so that prompts sharing a prefix meet
the replica whose prefix cache holds it. Plain bookkeeping, no Ray and no model, so it is
tested exactly (tests/python/package/test_serve_protocol.py); ridge.serve.router applies
it to Ray Serve's live replicas.

The prompt's text is cut into blocks of block_chars characters, each block's key hashing
the whole prefix up to its end (as the engine's KV blocks chain their hashes). A prompt
goes, in order of preference:
  1. to the live replica that last served its longest known prefix (the owner map, least
     recently used entries dropped past `capacity`);
  2. else to the replica that rendezvous hashing gives the first block: each (key, replica)
     pair gets a hash and the highest wins, so replicas joining or leaving move only the
     prefixes that were theirs (consistent hashing, with no ring to rebuild);
  and to the least-loaded replica instead when the preferred one has more than
  `imbalance` requests in flight beyond the least-loaded's.

    affinity = PrefixAffinity()
    order = affinity.choose(prompt_text, ["r1", "r2"], {"r1": 0, "r2": 3})  # best first
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Dict, List, Mapping, Sequence


def _hash(data: bytes) -> bytes:
    # blake2b, not hash(): every ingress process must give a prompt the same keys.
    return hashlib.blake2b(data, digest_size=8).digest()


class PrefixAffinity:
    def __init__(self, block_chars: int = 64, max_blocks: int = 64, imbalance: int = 4,
                 capacity: int = 1 << 16) -> None:
        if block_chars < 1 or max_blocks < 1 or imbalance < 0 or capacity < 1:
            raise ValueError(f"PrefixAffinity: block_chars ({block_chars}), max_blocks ({max_blocks}) and capacity "
                             f"({capacity}) must be >= 1, imbalance ({imbalance}) >= 0")
        self.block_chars = block_chars
        self.max_blocks = max_blocks
        self.imbalance = imbalance
        self.capacity = capacity
        self._owner: "OrderedDict[bytes, str]" = OrderedDict()  # prefix key -> replica that served it

    def prefix_keys(self, text: str) -> List[bytes]:
        """One key per whole block of the text's first max_blocks blocks, each hashing
        the prefix up to the block's end; a text shorter than a block is one key."""
        data = text.encode("utf-8", "surrogatepass")
        step = self.block_chars
        n_blocks = min(len(text) // step, self.max_blocks)
        if n_blocks == 0:
            return [_hash(b"short:" + data)]
        keys, prev = [], b""
        for i in range(n_blocks):
            prev = _hash(prev + text[i * step:(i + 1) * step].encode("utf-8", "surrogatepass"))
            keys.append(prev)
        return keys

    @staticmethod
    def rendezvous(key: bytes, replicas: Sequence[str]) -> List[str]:
        """The replicas in the order rendezvous hashing ranks them for the key."""
        return sorted(replicas, key=lambda r: _hash(key + r.encode()), reverse=True)

    def choose(self, text: str, replicas: Sequence[str], load: Mapping[str, int]) -> List[str]:
        """The live replicas, best first, for this prompt; records that the first one
        serves its prefixes. load: requests in flight per replica (missing: 0)."""
        if not replicas:
            return []
        keys = self.prefix_keys(text)
        live = set(replicas)
        ranked = self.rendezvous(keys[0], replicas)
        preferred = ranked[0]
        for key in reversed(keys):
            owner = self._owner.get(key)
            if owner in live:
                preferred = owner
                break
        least = min(ranked, key=lambda r: load.get(r, 0))  # min keeps the rendezvous order on ties
        if load.get(preferred, 0) > load.get(least, 0) + self.imbalance:
            preferred = least
        for key in keys:
            self._owner[key] = preferred
            self._owner.move_to_end(key)
        while len(self._owner) > self.capacity:
            self._owner.popitem(last=False)
        rest = sorted((r for r in ranked if r != preferred), key=lambda r: load.get(r, 0))
        return [preferred] + rest

    def owners(self) -> Dict[bytes, str]:
        return dict(self._owner)
