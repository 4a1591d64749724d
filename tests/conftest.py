"""Make the repository importable when pytest runs without an installed package."""
import os
import pathlib
import sys

ROOT = str(pathlib.Path(__file__).resolve().parents[1])
# Inductor's pool of compile workers warms up in the background and takes the CPU from the
# timings that follow a compile on a small machine: compile in-process in tests.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# Spin-waiting OpenMP threads make timings meaningless on a shared, loaded machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests draw the same examples on every run unless asked to explore, so that a
# green run is reproducible; OLLIE_HYPOTHESIS=explore draws fresh random examples.
settings.register_profile("reproducible", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("OLLIE_HYPOTHESIS", "reproducible"))


@pytest.fixture(autouse=True)
def private_cache_dir(tmp_path_factory, monkeypatch):
    """Tests never read or write the user's cache, nor each other's: one folder per test."""
    path = tmp_path_factory.mktemp("ollie-cache")
    monkeypatch.setenv("OLLIE_CACHE_DIR", str(path))
    return path
