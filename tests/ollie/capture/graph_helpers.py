"""ATen graphs of small functions, for the tests of whole-graph rewrites."""
from torch.fx.experimental.proxy_tensor import make_fx


def graph_of(fn, *args):
    """``fn``'s ATen graph with fake values on every node, and its fake inputs."""
    gm = make_fx(fn, tracing_mode="fake")(*args)
    return gm, [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]


def symbolic_graph_of(fn, *args):
    """``fn``'s ATen graph with every size of ``args`` a symbol (what ``fn`` closes over
    keeps its sizes), and its fake inputs."""
    gm = make_fx(fn, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*args)
    fakes = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
    assert all(not isinstance(d, int) for x in fakes for d in x.shape)
    return gm, fakes


def count(gm, target) -> int:
    return sum(n.target == target for n in gm.graph.nodes)
