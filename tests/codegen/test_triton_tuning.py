"""Launch configurations: candidates per kernel kind, CPU defaults, and the memory of choices
(in the process and in a JSON file) -- measured on a GPU, faked here."""
import json

import pytest
import torch

from codegen.triton import tuning
from codegen.triton.tuning import Tuner, candidates, candidates_default


@pytest.mark.parametrize("kind,problem", [
    ("map", {"N": 100}), ("reduce", {"N_OUT": 10, "N_RED": 3000}), ("row", {"ROWS": 4, "L": 2000}),
    ("dot", {"M": 20, "N": 3000, "K": 8, "B": 1}), ("banded", {"M": 2500, "N": 2001, "K": 64, "B": 32}),
])
def test_candidates_are_capped_to_the_problem_and_distinct(kind, problem):
    cands = candidates(kind, problem)
    assert cands and len(cands) == len({tuple(sorted(c.items())) for c in cands})
    for c in cands:
        assert set(c) == set(tuning.BLOCKS[kind]) | {"num_warps", "num_stages"}
    if kind == "map":
        assert all(c["BLOCK"] <= 128 for c in cands)
    if kind in ("dot", "banded"):  # tl.dot needs 16 or more on each side
        assert all(min(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"]) >= 16 for c in cands)
        assert all(c["BLOCK_M"] <= 32 for c in cands) if kind == "dot" else True


def test_interpreter_defaults_use_large_blocks():
    assert candidates_default("map", {"N": 10 ** 6}) == {
        "BLOCK": tuning.INTERPRETER_TILE, "num_warps": 4, "num_stages": 2}
    cfg = candidates_default("reduce", {"N_OUT": 1000, "N_RED": 10})
    assert cfg["BLOCK_RED"] == 16 and cfg["BLOCK_OUT"] * cfg["BLOCK_RED"] <= tuning.INTERPRETER_TILE


def test_cpu_launches_are_not_measured():
    tuner = Tuner()
    cfg = tuner.config(object(), None, "map", {"N": 10}, (torch.zeros(10),), {})
    assert cfg == candidates_default("map", {"N": 10}) and tuner.memory == {}


class FakeGPU(Tuner):
    """A tuner that believes it runs on a GPU and 'measures' by a fixed table."""

    def __init__(self, path=None):
        super().__init__(path)
        self.measured = 0

    def device_name(self, ref):
        return "FakeGPU 80GB"

    def kernel_key(self, kernel):
        return "k-0123"

    def measure(self, kernel, grid, kind, problem, args, constexprs):
        self.measured += 1
        return min(candidates(kind, problem), key=lambda c: abs(c["BLOCK"] - 1024))


def test_choices_are_measured_once_and_remembered_in_a_json_file(tmp_path):
    path = tmp_path / "tuning.json"
    tuner = FakeGPU(path)
    args, problem = (torch.zeros(8),), {"N": 1 << 20}
    first = tuner.config(None, None, "map", problem, args, {})
    again = tuner.config(None, None, "map", problem, args, {})
    assert first == again and first["BLOCK"] == 1024 and tuner.measured == 1
    stored = json.loads(path.read_text())
    assert stored == {"k-0123|map|torch.float32|FakeGPU 80GB": first}
    fresh = FakeGPU(path)  # another process: reads the file, measures nothing
    assert fresh.config(None, None, "map", problem, args, {}) == first and fresh.measured == 0


def test_tuning_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("OLLIE_TRITON_TUNE", "0")
    tuner = FakeGPU()
    cfg = tuner.config(None, None, "dot", {"M": 512, "N": 512, "K": 512, "B": 1},
                       (torch.zeros(1),), {})
    assert cfg == candidates("dot", {"M": 512, "N": 512, "K": 512, "B": 1})[0]
    assert tuner.measured == 0
