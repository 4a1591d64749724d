"""Ollie's identity in torch.compile's caches.

AOTAutograd's cache keys a compiled graph by the Dynamo graph and Inductor's configuration,
not by the compiler that AOTAutograd hands the graph to. Ollie's compile is told apart by a
no-op Inductor pass whose ``uuid`` names what Ollie's choice depends on: its version, its
rules and code generators (``ollie.cache.current_versions``) and the options that change a
decision. A second process then loads the artifact Ollie chose, the rewritten graph or the
original, from AOTAutograd's and Inductor's caches: no translation, no derivation, no
measurement, no Inductor compile; a plain torch.compile never loads Ollie's artifact. With
``cache=False`` Ollie keeps no decision, and AOTAutograd's cache is off for its graphs.
"""
from __future__ import annotations

import hashlib
import json

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from ollie import cache

DECISION_OPTIONS = ("backend", "inductor", "budget_s", "max_nodes", "candidates",
                    "measure_top")


class CacheIdentity(CustomGraphPass):
    """Changes nothing in the graph; its ``uuid`` is Ollie's part of the cache key."""

    def __init__(self, options):
        self.key = hashlib.sha256(json.dumps(
            {"ollie": cache.current_versions(),
             "options": {name: getattr(options, name) for name in DECISION_OPTIONS},
             # the decisions' own folder: an artifact chosen under one is not another's
             "decisions": str(cache.Cache(options.cache_dir).dir.resolve())},
            sort_keys=True, default=str).encode()).hexdigest()

    def __call__(self, graph: torch.fx.Graph) -> None:
        return None

    def uuid(self) -> str:
        return self.key
