"""Each test starts with Dynamo's caches empty: compiled code is cached per code object, and
a test must not run what another test compiled (nor hit the recompile limit)."""
import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
