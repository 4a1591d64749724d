"""Capture: Ollie as a ``torch.compile`` backend.

- ``backend``: the backend itself (Dynamo → AOTAutograd → Ollie → Inductor) and its registration.
- ``aten``: the core-ATen → ``ir`` table, one row per operator.
- ``regions``: neighbouring translated nodes composed into regions (one expression each).
- ``graph_pass``: one ATen graph through derivation, verification and measurement.
- ``rewrite``: chosen programs spliced back into the graph as ATen nodes.
- ``report``: the text of ``explain``.
"""
