"""The persistent result cache: round trips, torn writes, corruption, versions, two processes."""
import json
import multiprocessing as mp
import os

import pytest

from ir import Tensor, ops
from ollie import cache as cache_mod
from ollie.cache import Cache, make_key

VALUE = {"program": "a: f32[4, 5]\nb: f32[5, 6]\nmm[i,j] = sum[k] a[i,k] * b[k,j]",
         "rule_chain": ["split", "inline"], "cost_before": 3.0, "cost_after": 1.5,
         "measured": {"eager_s": 2e-3, "ollie_s": 1e-3}, "decision": "adopted"}


@pytest.fixture
def cache(tmp_path):
    return Cache(tmp_path)


def key_of(shape=(4, 5)):
    expr = ops.matmul(Tensor("a", shape), Tensor("b", (shape[1], 6)))
    return make_key(expr, [shape, (shape[1], 6)], ["float32"] * 2, "cpu")


def test_round_trip(cache):
    key = key_of()
    assert cache.get(key) is None
    assert cache.put(key, VALUE)
    assert cache.get(key) == VALUE


def test_key_depends_on_expression_shapes_device_and_versions():
    expr = ops.matmul(Tensor("a", (4, 5)), Tensor("b", (5, 6)))
    base = make_key(expr, [(4, 5), (5, 6)], ["float32"] * 2, "cpu")
    assert base == make_key(expr, [(4, 5), (5, 6)], ["float32"] * 2, "cpu")
    assert base != key_of((4, 7))
    assert base != make_key(expr, [(4, 5), (5, 6)], ["float32"] * 2, "cuda:0")
    assert base != make_key(expr, [(4, 5), (5, 6)], ["float16"] * 2, "cpu")
    assert base != make_key(expr, [(4, 5), (5, 6)], ["float32"] * 2, "cpu",
                            dict(cache_mod.current_versions(), torch="0.0"))


def test_region_key_from_real_tensors():
    import torch
    expr = ops.matmul(Tensor("a", (4, 5)), Tensor("b", (5, 6)))
    tensors = {"b": torch.zeros(5, 6), "a": torch.zeros(4, 5)}
    key = cache_mod.region_key(expr, tensors)
    assert key == cache_mod.region_key(expr, dict(reversed(list(tensors.items()))))
    assert key != cache_mod.region_key(expr, {n: t.double() for n, t in tensors.items()})


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OLLIE_CACHE_DIR", str(tmp_path / "env"))
    assert Cache().dir == tmp_path / "env"
    assert Cache(tmp_path / "arg").dir == tmp_path / "arg"  # the argument wins


def test_interrupted_write_is_ignored_and_a_put_still_works(cache):
    key = key_of()
    cache.put(key, VALUE)
    path = cache.path(key)
    # a writer killed mid-write: a partial temporary file and a truncated entry
    (path.parent / f".{path.stem}.dead.tmp").write_bytes(path.read_bytes()[:40])
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    assert cache.get(key) is None
    assert cache.info()["ignored"] == 1 and cache.info()["temporary"] == 1
    assert cache.put(key, VALUE)
    assert cache.get(key) == VALUE


def test_hand_edited_entry_is_ignored(cache):
    key = key_of()
    cache.put(key, VALUE)
    env = json.loads(cache.path(key).read_text())
    env["value"]["decision"] = "eager"  # checksum no longer matches
    cache.path(key).write_text(json.dumps(env))
    assert cache.get(key) is None
    cache.path(key).write_bytes(b"\xff\x00 not json")
    assert cache.get(key) is None
    cache.path(key).write_text("[1, 2, 3]")
    assert cache.get(key) is None


def test_entry_from_other_versions_is_ignored(tmp_path):
    old = Cache(tmp_path, versions=dict(cache_mod.current_versions(), ollie="0.0.1"))
    key = key_of()
    old.put(key, VALUE)
    assert old.get(key) == VALUE
    assert Cache(tmp_path).get(key) is None
    assert Cache(tmp_path).prune() == 1 and not old.path(key).exists()


def test_info_and_clear(cache):
    for n in range(3):
        cache.put(key_of((4, 5 + n)), VALUE)
    info = cache.info()
    assert info["entries"] == 3 and info["bytes"] > 0 and info["dir"] == str(cache.dir)
    assert "3" in cache_mod.cache_info_command(cache.dir)
    assert cache_mod.cache_clear_command(cache.dir).startswith("ollie cache: removed 3")
    assert cache.info()["entries"] == 0 and cache.get(key_of()) is None


def _hammer(cache_dir: str, key: str, writer: int, rounds: int, queue) -> None:
    cache, bad = Cache(cache_dir), 0
    for n in range(rounds):
        cache.put(key, dict(VALUE, writer=writer, n=n, pad="x" * 20000))
        got = cache.get(key)
        bad += got is None or got.get("pad") != "x" * 20000
    queue.put(bad)


def test_two_processes_writing_one_key(tmp_path):
    key = key_of()
    ctx = mp.get_context("spawn" if os.name == "nt" else "fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), key, w, 60, queue))
             for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert [queue.get(timeout=5), queue.get(timeout=5)] == [0, 0]  # never a torn read
    final = Cache(tmp_path).get(key)
    assert final is not None and final["writer"] in (0, 1) and final["n"] == 59
    assert not list(Cache(tmp_path).entries_dir.glob("*.tmp"))  # no temporary left behind
