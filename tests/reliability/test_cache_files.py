"""Planted or damaged files in the cache folder never hang, crash or mislead Ollie.

Each case plants what a hostile user, a dying process or a full disk could leave, then reads
it the way Ollie does. Reads that could hang or eat memory on a regression run in a child
process under a watchdog (``proc.run_python``).
"""
import json
import os
import stat
import time
import warnings

import pytest

from ollie import cache as cache_mod
from ollie.cache import Cache
from reliability_helpers import dead_pid, run_python

KEY = "ab" * 32
VALUE = {"program": None, "rule_chain": ["split"], "cost_before": 2.0, "cost_after": 1.0,
         "eager_s": 1e-3, "ollie_s": 5e-4, "error": 0.0, "decision": "adopted",
         "backend": "torch"}

CHILD_GET = """
import sys, time
from ollie.cache import Cache
t0 = time.perf_counter()
print(repr(Cache(sys.argv[1]).get(sys.argv[2])), round(time.perf_counter() - t0, 3))
"""


def planted(tmp_path, make) -> Cache:
    cache = Cache(tmp_path / "c")
    assert cache.put(KEY, VALUE)
    path = cache.path(KEY)
    path.unlink()
    make(path)
    return cache


def child_get(cache: Cache, timeout=20, max_mb=600):
    return run_python(CHILD_GET, [str(cache.dir), KEY], timeout=timeout, max_mb=max_mb)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_entry_is_ignored_at_once(tmp_path):
    cache = planted(tmp_path, os.mkfifo)
    r = child_get(cache)
    assert r.returncode == 0 and not r.killed, r.killed or r.stderr[-500:]
    assert r.stdout.startswith("None")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_a_link_to_dev_zero_is_not_followed(tmp_path):
    cache = planted(tmp_path, lambda p: os.symlink("/dev/zero", p))
    r = child_get(cache, max_mb=400)
    assert r.returncode == 0 and not r.killed, r.killed or r.stderr[-500:]
    assert r.stdout.startswith("None") and r.peak_mb < 400


def test_a_link_to_a_valid_entry_elsewhere_is_not_followed(tmp_path):
    """A link could point at an entry written for another key or in another folder."""
    other = Cache(tmp_path / "other")
    other.put(KEY, VALUE)
    cache = planted(tmp_path, lambda p: os.symlink(other.path(KEY), p))
    assert other.get(KEY) == VALUE and cache.get(KEY) is None


def test_an_oversized_entry_is_not_read(tmp_path):
    cache = planted(tmp_path, lambda p: p.write_bytes(b" " * (cache_mod.ENTRY_CAP + 1)))
    assert cache.get(KEY) is None


def test_an_entry_nested_100000_deep_is_ignored_and_info_still_works(tmp_path):
    cache = planted(tmp_path, lambda p: p.write_text("[" * 100_000 + "]" * 100_000))
    assert cache.get(KEY) is None
    info = cache.info()
    assert info["ignored"] == 1 and info["entries"] == 0
    assert "ignored:      1" in cache_mod.cache_info_command(cache.dir)


def test_cache_info_command_on_a_hostile_folder_exits_0_in_one_process(tmp_path):
    cache = planted(tmp_path, lambda p: p.write_text("{" * 100_000))
    if hasattr(os, "mkfifo"):
        os.mkfifo(cache.entries_dir / ("cd" * 32 + ".json"))
    r = run_python(None, ["cache", "info", "--dir", str(cache.dir)], module="ollie",
                   timeout=30, max_mb=600)
    assert r.returncode == 0 and not r.killed, r.killed or r.stderr[-800:]
    assert "Traceback" not in r.stderr and "ignored:" in r.stdout


@pytest.mark.parametrize("field, bad", [
    ("rule_chain", 7), ("rule_chain", [1, 2]), ("cost_before", [1, 2, 3]),
    ("decision", None), ("eager_s", "fast"), ("spread", -1.0), ("speedup", 0.0),
    ("remeasured", True),
])
def test_an_entry_with_a_valid_checksum_but_wrong_types_is_ignored(tmp_path, field, bad):
    cache = Cache(tmp_path)
    cache.put(KEY, VALUE)
    forge(cache, KEY, dict(VALUE, **{field: bad}))
    assert cache.get(KEY) is None
    assert not cache.put(KEY, dict(VALUE, **{field: bad}))  # nor stored in the first place


@pytest.mark.parametrize("value", [[1, 2, 3], "adopted", 7, [], {"rule_chain": []}])
def test_a_value_that_is_not_an_entry_is_ignored(tmp_path, value):
    cache = Cache(tmp_path)
    cache.put(KEY, VALUE)
    forge(cache, KEY, value)
    assert cache.get(KEY) is None


def forge(cache: Cache, key: str, value) -> None:
    """Rewrite the entry with ``value`` and a checksum that matches it (what a writer who
    read the source could do)."""
    env = json.loads(cache.path(key).read_text())
    env["value"] = value
    env["checksum"] = cache_mod._checksum(env["key"], env["versions"], value)
    cache.path(key).write_text(json.dumps(env))


def test_noise_fields_round_trip_and_tell_a_margin_within_noise(tmp_path):
    from ollie import cache_entry
    cache = Cache(tmp_path)
    noisy = dict(VALUE, eager_s=1e-3, ollie_s=0.96e-3, speedup=1.06, spread=0.04, margin=0.95)
    clear = dict(noisy, speedup=3.0, spread=0.04)
    assert cache.put("k1", noisy) and cache.put("k2", clear)
    assert cache_entry.within_noise(cache.get("k1")) and cache_entry.needs_remeasure(noisy)
    assert not cache_entry.within_noise(cache.get("k2"))
    assert not cache_entry.needs_remeasure(dict(noisy, remeasured=1))


def test_orphan_temporary_files_of_dead_writers_are_removed(tmp_path):
    cache = Cache(tmp_path)
    cache.entries_dir.mkdir(parents=True)
    dead = cache.entries_dir / f".{KEY}.{dead_pid()}.x1y2.tmp"   # a writer killed with -9
    old = cache.entries_dir / ".legacy-name.tmp"                   # an old writer's, stale
    alive = cache.entries_dir / f".{KEY}.{os.getpid()}.z3.tmp"     # a writer still at work
    for f in (dead, old, alive):
        f.write_bytes(b'{"format": 1, "key": "trunc')
    ancient = time.time() - 3600 - 60
    os.utime(old, (ancient, ancient))
    assert cache.put(KEY, VALUE)
    assert not dead.exists() and not old.exists() and alive.exists()
    assert cache.get(KEY) == VALUE


# -- trust ---------------------------------------------------------------------------------
def test_the_cache_folder_is_created_0700(tmp_path):
    cache = Cache(tmp_path / "new" / "cache")
    assert cache.put(KEY, VALUE)
    if hasattr(os, "getuid"):
        assert stat.S_IMODE(os.stat(cache.dir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(cache.entries_dir).st_mode) == 0o700


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_folder_others_can_write_is_refused_with_one_warning(tmp_path, mode):
    cache = Cache(tmp_path / f"shared{mode:o}")
    assert cache.put(KEY, VALUE)
    os.chmod(cache.dir, mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.get(KEY) is None
        assert not cache.put(KEY, VALUE)
        assert Cache(cache.dir).get(KEY) is None
    messages = [str(w.message) for w in caught if issubclass(w.category, cache_mod.CacheWarning)]
    assert len(messages) == 1, messages          # once per folder, not per call
    assert "\n" not in messages[0] and "writable by" in messages[0]
    assert "deriving without a disk cache" in messages[0]


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners")
def test_a_folder_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    cache = Cache(tmp_path / "theirs")
    assert cache.put(KEY, VALUE)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(cache.dir).st_uid + 1)
    with pytest.warns(cache_mod.CacheWarning, match="owned by another user"):
        assert cache.get(KEY) is None
    assert "owned by another user" in cache_mod.cache_info_command(cache.dir)


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to chown")
def test_a_folder_really_chowned_to_another_user_is_refused(tmp_path):
    cache = Cache(tmp_path / "chowned")
    assert cache.put(KEY, VALUE)
    os.chown(cache.dir, 12345, 12345)
    with pytest.warns(cache_mod.CacheWarning, match="uid 12345"):
        assert cache.get(KEY) is None


# -- the learned model and the measurements ---------------------------------------------------
CHILD_MODEL = """
import sys
from ollie.cost.learned import LearnedCost
m = LearnedCost.load(cache_dir=sys.argv[1])
print("loaded", m.booster.num_trees())
"""


@pytest.mark.parametrize("damage", ["truncate", "flip", "link to /dev/zero"])
def test_a_damaged_tuned_model_falls_back_to_the_shipped_one(tmp_path, damage):
    from ollie.cost.learned import DEFAULT_MODEL, LearnedCost, TUNED_MODEL
    shipped = LearnedCost.load_default()
    shipped.save(tmp_path / TUNED_MODEL)       # a tuned model with its checksum
    tuned = tmp_path / TUNED_MODEL
    text = DEFAULT_MODEL.read_text()
    if damage == "truncate":                    # LightGBM aborts the process on this one
        tuned.write_text(text[: len(text) // 2])
    elif damage == "flip":
        tuned.write_text(text.replace("split_feature=", "split_feature=9", 1))
    else:
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero here")
        tuned.unlink()
        tuned.symlink_to("/dev/zero")
    r = run_python(CHILD_MODEL, [str(tmp_path)], timeout=60, max_mb=1500)
    assert r.returncode == 0, f"rc {r.returncode}: {r.last_line}"
    assert r.stdout.startswith("loaded")


def test_measurements_are_read_without_following_links_or_deep_lines(tmp_path):
    from ollie.cost import measure
    path = tmp_path / "measurements.jsonl"
    path.write_text(json.dumps({"seconds": 1e-3, "device": "cpu"}) + "\n"
                    + "[" * 50_000 + "\n" + '{"seconds": NaN}\n')
    assert len(measure.load_records(path)) == 1
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    assert measure.load_records(link) == []
    assert not measure.append_record({"seconds": 1.0}, link)
