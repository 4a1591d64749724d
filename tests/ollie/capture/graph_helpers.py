"""ATen graphs of small functions, for the tests of whole-graph rewrites."""
from torch.fx.experimental.proxy_tensor import make_fx

from ollie.capture import generated_rules


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


def generated_on(fn, args, weights=()):
    """The graph of ``fn`` with the generated rules applied (``weights``: the inputs held
    fixed, folded), and the lines they wrote."""
    gm, _ = graph_of(fn, *args)
    generated_rules.mark_weights(gm, weights)
    applied = generated_rules.apply(gm.graph)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm, applied
