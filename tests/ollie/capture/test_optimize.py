"""``@ollie.optimize`` / ``torch.compile(backend="ollie")`` end to end: correctness, recompiles,
decisions, fallbacks and the explanation."""
import time
import warnings

import pytest
import torch
import torch.nn.functional as F

import codegen
import ir
import ollie
from ollie import choose
from ollie import region as region_mod

FAST = dict(inductor=False, measure_cap_s=0.05)


def best_seconds(*fns, rounds=15):
    """Best time of each function over interleaved rounds: robust to a loaded machine."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def chain_args(m=512, k=1024, n=16):
    torch.manual_seed(0)
    return torch.randn(m, k), torch.randn(k, k), torch.randn(k, n)


def regions(f):
    return [r for report in f.backend.reports for r in report.regions]


def chain(a, b, c):
    return (a @ b) @ c


def test_registered_backend_name_works():
    compiled = torch.compile(chain, backend="ollie", options={"measure_cap_s": 0.05})
    a, b, c = chain_args(128, 256, 4)
    ref = chain(a, b, c)
    assert torch.allclose(compiled(a, b, c), ref, rtol=1e-4, atol=1e-3 * ref.abs().max())


def test_unknown_backend_option_is_refused_in_one_line():
    with pytest.raises(Exception, match="unknown option.*'budget'"):
        torch.compile(chain, backend="ollie", options={"budget": 1})(*chain_args(8, 8, 2))


def test_matmul_chain_is_reassociated_and_faster_under_inductor():
    f = ollie.optimize(chain, measure_cap_s=0.2)
    a, b, c = chain_args()
    ref = chain(a, b, c)
    with torch.no_grad():
        assert torch.allclose(f(a, b, c), ref, rtol=1e-3, atol=1e-3 * ref.abs().max().item())
    report = f.backend.reports[0]
    # the region's program, or the same reassociation as a graph substitution on the original
    # graph (the two compete, compiled, and run alike: either may win)
    assert report.adopted and (report.regions[0].decision.adopted or
                               "generated: mm(mm(X, Y), V) → mm(X, mm(Y, V))"
                               in report.substitutions)
    # A(BC): the intermediate contracts b with c, so it has c's thin column count.
    inner = [s for s in ir.sub_scopes(report.regions[0].chosen)
             if s is not report.regions[0].chosen]
    assert any(s.shape == (1024, 16) for s in inner)
    with torch.no_grad():
        eager, optimized = best_seconds(lambda: chain(a, b, c), lambda: f(a, b, c))
    assert eager / optimized > 2.0  # A(BC) needs ~1/20 of the flops


def test_second_call_with_same_signature_does_not_recompile(monkeypatch):
    f = ollie.optimize(chain, **FAST)
    args = chain_args(64, 32, 4)
    f(*args)
    monkeypatch.setattr(region_mod, "compile_region",
                        lambda *a, **k: pytest.fail("recompiled"))
    f(*args)
    assert f.backend.graphs == 1


def test_new_shapes_get_their_own_graph():
    f = ollie.optimize(chain, **FAST)
    for m in (64, 65):
        assert f(*chain_args(m, 32, 4)).shape == (m, 4)
    assert f.backend.graphs == 2


def test_region_without_improvement_is_kept(monkeypatch):
    # A derived add+relu may or may not beat the original on a given machine; pin the
    # timing to a tie so that what is tested is the decision, not the machine.
    from ollie.cost import measure
    monkeypatch.setattr(measure, "compare", lambda a, b, budget_s: measure.Comparison(
        1e-3, 1e-3, 1.0, 0.0, 5))
    f = ollie.optimize(lambda x, y, z: torch.relu(x @ y + z), **FAST)
    x, y, z = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64, 64)
    assert torch.allclose(f(x, y, z), torch.relu(x @ y + z), atol=1e-5)
    assert all(r.kernel is None for r in regions(f))
    assert not f.backend.reports[0].adopted


def test_data_dependent_control_flow_is_a_graph_break_not_a_fallback():
    def data_dependent(a, b, c):
        t = (a @ b) @ c
        if t.sum() > 0:
            return t * 2
        return t

    f = ollie.optimize(data_dependent, **FAST)
    args = chain_args(64, 32, 4)
    ref = data_dependent(*args)
    assert torch.allclose(f(*args), ref, atol=1e-4 * ref.abs().max())
    text = str(f.explain())
    assert "graph break" in text and f.backend.graphs >= 2


def test_unsupported_op_is_left_to_the_compiler_and_the_rest_is_optimized():
    def h(a, b, c):
        return torch.sort((a @ b) @ c, dim=0).values

    f = ollie.optimize(h, **FAST)
    a, b, c = chain_args(256, 512, 8)
    ref = h(a, b, c)
    assert torch.allclose(f(a, b, c), ref, rtol=1e-3, atol=1e-2 * ref.abs().max().item())
    text = str(f.explain())
    assert "aten.sort" in text and "left to Inductor" in text
    assert any(r.decision.adopted for r in regions(f))


def test_wrong_kernel_is_rejected_and_the_original_kept(monkeypatch):
    import codegen

    real_lower = codegen.lower

    def broken_lower(program, backend="torch"):
        kernel = real_lower(program, backend=backend)

        class Wrong:
            input_names = kernel.input_names
            source = kernel.source

            def __call__(self, *args):
                return kernel(*args) + 1.0

        return Wrong()

    monkeypatch.setattr(codegen, "lower", broken_lower)
    f = ollie.optimize(chain, **FAST)
    a, b, c = chain_args(128, 256, 4)
    assert torch.allclose(f(a, b, c), chain(a, b, c), rtol=1e-4, atol=1e-3)
    report = regions(f)[0]
    assert report.kernel is None and "matched the original" in report.decision.text


def test_explain_names_capture_rule_chain_and_costs_with_units():
    f = ollie.optimize(chain, **FAST)
    text = str(f.explain(*chain_args(128, 256, 4)))
    for part in ("captured expression", "rule chain", "chosen program", "µs", "decision",
                 ", ranker "):  # the candidate ranker's estimate beside each measurement
        assert part in text


def test_neighbouring_operators_are_composed_into_one_expression():
    f = ollie.optimize(lambda x, w: (x @ w).sum(0), **FAST)
    x, w = torch.randn(256, 128), torch.randn(128, 64)
    assert torch.allclose(f(x, w), (x @ w).sum(0), rtol=1e-3, atol=1e-2)
    assert len(regions(f)) == 1 and regions(f)[0].ops == ["aten.mm", "aten.sum"]


def test_conv_function_returns_eager_numbers():
    f = ollie.optimize(lambda x, w: F.relu(F.conv2d(x, w, padding=1)), **FAST)
    x, w = torch.randn(1, 8, 12, 12), torch.randn(16, 8, 3, 3)
    assert torch.allclose(f(x, w), F.relu(F.conv2d(x, w, padding=1)), rtol=1e-4, atol=1e-4)


def test_bad_options_are_rejected_at_decoration():
    with pytest.raises(ValueError, match="unknown backend"):
        ollie.optimize(backend="cuda-magic")
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="budget_s must be a finite number > 0"):
            ollie.optimize(budget_s=bad)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="measure_top must be a positive integer"):
            ollie.optimize(measure_top=bad)


def test_module_level_explain_accepts_plain_functions():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ollie.OllieWarning)
        text = str(ollie.explain(chain, *chain_args(64, 32, 4)))
    assert "region" in text


def test_explain_refuses_what_torch_compile_compiled_as_it_keeps_no_record():
    for compiled in (torch.compile(chain, backend="ollie"),
                     torch.compile(torch.nn.Linear(4, 4), backend="ollie")):
        with pytest.raises(TypeError, match="compiled by torch.compile.*ollie.optimize"):
            ollie.explain(compiled, torch.randn(4, 4))
    assert "graph 1" in str(ollie.explain(ollie.optimize(torch.nn.Linear(4, 4)),
                                          torch.randn(4, 4)))


def test_optimizing_a_module_leaves_its_own_attributes_alone():
    class Scorer(torch.nn.Linear):
        def explain(self):  # a method of the user's, named like Ollie's
            return "the user's"
    module, twin = Scorer(4, 4), Scorer(4, 4)
    torch.compile(twin, backend="eager")(torch.randn(4, 4))  # what torch.compile itself sets
    optimized = ollie.optimize(module)
    assert "graph 1" in str(optimized.explain(torch.randn(4, 4)))
    assert set(vars(module)) == set(vars(twin)) and module.explain() == "the user's"


def test_triton_backend_runs_through_the_interpreter_on_cpu(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    f = ollie.optimize(chain, backend="triton", **FAST)
    a, b, c = chain_args(64, 32, 4)
    assert torch.allclose(f(a, b, c), chain(a, b, c), rtol=1e-4, atol=1e-4)
    assert all("triton" in note for *_, note in regions(f)[0].measured)


def test_progress_line_reports_derivation_and_measurement(capsys):
    f = ollie.optimize(chain, progress=True, **FAST)
    f(*chain_args(64, 32, 4))
    err = capsys.readouterr().err
    assert "deriving" in err or "measuring" in err


def test_shape_arithmetic_is_static_and_the_views_compose():
    def f(a, b, c):
        n = a.shape[0]
        return ((a.view(n, -1) @ b) @ c).reshape(a.size(0) // 2, -1)

    g = ollie.optimize(f, **FAST)
    a, b, c = torch.randn(64, 8, 128), torch.randn(1024, 1024), torch.randn(1024, 4)
    ref = f(a, b, c)
    assert torch.allclose(g(a, b, c), ref, rtol=1e-4, atol=1e-3 * ref.abs().max().item())
    assert regions(g)[0].decision.adopted
    a2 = torch.randn(32, 8, 128)
    ref2 = f(a2, b, c)
    assert torch.allclose(g(a2, b, c), ref2, rtol=1e-4, atol=1e-3 * ref2.abs().max().item())


def test_values_computed_from_data_are_not_constants():
    def f(x):
        return torch.relu(x * x.abs().max().item())  # a scalar from the data, not the shape

    g = ollie.optimize(f, **FAST)
    x = torch.randn(4, 3)
    assert torch.equal(g(x), f(x))
    assert torch.equal(g(x * 3), f(x * 3))  # same shapes, other data


def test_banded_windows_from_strided_views_compose_into_one_region():
    from ollie.cli.bench_gpu import g2bmm_fn

    fn = g2bmm_fn(w=8, d=4, chunk=8)  # pad, as_strided windows, einsum per chunk, cat
    q, k = torch.randn(2, 64, 16), torch.randn(2, 64, 16)
    g = ollie.optimize(fn, **FAST)
    assert torch.allclose(g(q, k), fn(q, k), atol=1e-5)
    assert len(regions(g)) == 1 and len(g.backend.reports) == 1
    assert sum(op == "aten.as_strided" for op in regions(g)[0].ops) == 3  # 17 offsets, chunks of 8


def test_reading_layout_recompiles_per_layout():
    def windows(x):  # reads x's storage: the answer depends on x's layout
        return torch.relu(x.as_strided((3, 4), (2, 1), x.storage_offset() + 1)) * 2

    g = ollie.optimize(windows, **FAST)
    x = torch.randn(4, 4)
    assert torch.equal(g(x), windows(x))
    t = torch.randn(4, 4).t()  # same shape, other strides
    assert torch.equal(g(t), windows(t))
    s = torch.randn(20)[3:19].view(4, 4)  # same shape and strides, other storage offset
    assert torch.equal(g(s), windows(s))


def test_the_package_declares_its_dynamo_backend_entry_point():
    from importlib.metadata import entry_points
    points = {e.name: e.value for e in entry_points(group="torch_dynamo_backends")}
    assert points.get("ollie") == "ollie.capture.backend:ollie"


@pytest.mark.parametrize("first", ["torch", "ollie"])
def test_backend_name_works_in_a_fresh_process(first):
    """Imported first or not imported at all, "ollie" resolves (the entry point and the
    registration on import must not clash)."""
    import subprocess
    import sys
    script = ("import torch\n" if first == "torch" else "import ollie, torch\n") + (
        "f = torch.compile(lambda a, b: (a @ b).relu(), backend='ollie',"
        " options={'inductor': False})\n"
        "a = torch.randn(8, 8)\n"
        "assert torch.allclose(f(a, a), (a @ a).relu())\n"
        "import ollie\n"
        "assert torch.allclose(f(a, a), (a @ a).relu())\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-1500:]


def test_a_rewrite_derived_once_serves_every_size_of_a_dynamic_graph(monkeypatch):
    backend = ollie.OllieBackend(ollie.Options(measure_cap_s=0.05))
    compiled = torch.compile(chain, backend=backend)  # dynamic=None: the 2nd shape is symbolic
    for m in (256, 320):  # static, then symbolic
        a, b, c = chain_args(m, 512, 4)
        assert torch.allclose(compiled(a, b, c), chain(a, b, c), rtol=1e-4, atol=1e-3)
    assert len(backend.reports) == 2 and backend.reports[1].adopted, \
        [r.note for r in backend.reports]
    monkeypatch.setattr(region_mod, "compile_region", lambda *a, **k: pytest.fail("derived"))
    for m in (100, 700, 33):  # no recompile, no derivation, right numbers
        a, b, c = chain_args(m, 512, 4)
        assert torch.allclose(compiled(a, b, c), chain(a, b, c), rtol=1e-4, atol=1e-3)
    assert backend.graphs == 2


def test_under_inductor_a_lone_product_with_elementwise_work_is_not_derived(tmp_path):
    # relu, scale and shift could only move around the product: Inductor fuses them in any form
    def glue(x, w, s):
        return torch.relu(x @ w) * s + 1

    f = ollie.optimize(glue, measure_cap_s=0.05, cache_dir=tmp_path)
    x, w, s = torch.randn(64, 32), torch.randn(32, 16), torch.randn(16)
    with torch.no_grad():
        assert torch.allclose(f(x, w, s), glue(x, w, s))
    assert regions(f) == []
    (graph,) = f.backend.reports
    assert any("a single aten.mm with only elementwise work around it" in why
               for _, _, why in graph.left), graph.left


@pytest.mark.parametrize("fn, shapes", [
    (lambda a, b: torch.diag(a @ b), ((32, 16), (16, 32))),  # n of the n² dot products
    (lambda a, b: (a[:, None, :] * b[None, :, :]).reshape(-1, 16).T @ b.repeat(32, 1),
     ((32, 16), (16, 16))),  # an outer product of the operands: a Khatri-Rao Gram
], ids=["diagonal", "outer_product"])
def test_under_inductor_a_lone_product_with_structure_around_it_is_derived(fn, shapes,
                                                                          tmp_path):
    f = ollie.optimize(fn, measure_cap_s=0.05, cache_dir=tmp_path)
    with torch.no_grad():
        f(*(torch.randn(*s) for s in shapes))
    assert regions(f), [why for r in f.backend.reports for _, _, why in r.left]


def test_under_inductor_a_candidate_keeping_the_contractions_is_not_measured(tmp_path):
    # a row maximum after a relu of the product (derived: a maximum is no linear step): it
    # cannot move inside the product; the scale and the shift can only move around it
    from ollie.decision import Outcome

    def glue(x, w, s):
        return (torch.relu(x @ w) * s + 1).amax(1)

    f = ollie.optimize(glue, measure_cap_s=0.05, cache_dir=tmp_path)
    x, w, s = torch.randn(64, 32), torch.randn(32, 16), torch.randn(16)
    with torch.no_grad():
        assert torch.allclose(f(x, w, s), glue(x, w, s), rtol=1e-4, atol=1e-4)
    (report,) = regions(f)
    assert report.decision.outcome is Outcome.GLUE_ONLY and report.measured == []


def test_where_timings_contradict_the_rankers_first_choice_they_are_taken_interleaved():
    from types import SimpleNamespace

    def kernel(fn):
        fn.input_names = ("x",)
        return SimpleNamespace(kernel=fn)

    x = torch.randn(256, 256)
    fast = kernel(lambda x: x + 1)
    slow = kernel(lambda x: x @ x @ x + 1)  # 2 matmuls: many times the add's time
    options = ollie.Options(measure_cap_s=0.05)
    # a sequential timing that met a load named the slow one best: the ranker's first stands
    assert choose._interleaved_best(slow, fast, {"x": x}, options) is fast
    assert choose._interleaved_best(fast, slow, {"x": x}, options) is fast


def test_under_inductor_a_region_is_also_timed_against_its_original_lowered_alike(
        monkeypatch):
    # a lead over the original's ATen calls run one by one may be only the fusion the
    # lowering does and Inductor does too: the derived kernel is timed against the original
    # expression lowered as it is, and explain says which original a lead is over
    from types import SimpleNamespace

    from ollie.cost import measure
    text = "x: f32[8,8]\nT[i,j] = exp(x[i,j]) * 2 + 1"
    expr, x = ir.parse(text), torch.randn(8, 8)
    kernel = codegen.lower(expr, fused=True)
    ran, stated = [], measure.Comparison(1.02e-3, 1e-3, 1.02, 0.01, 8)

    def timed(original, derived, budget_s):
        ran.append(original())
        return stated

    monkeypatch.setattr(measure, "compare", timed)
    timing = choose._against_lowered_original(expr, {"x": x}, kernel, [x],
                                                  SimpleNamespace(measure_cap_s=0.05))
    assert timing is stated and torch.allclose(ran[0], torch.exp(x) * 2 + 1)
    from ollie.decision import decide
    report = region_mod.RegionReport("r", [], expr, decision=decide(stated),
                                     original_lowered=True)
    assert "original (lowered alike) 1.020 ms" in report.describe()
    assert region_mod.RegionReport("r", [], expr, decision=decide(stated)).describe() \
        .count("(lowered alike)") == 0


def test_a_value_read_twice_by_one_contraction_is_composed_into_its_region(tmp_path):
    # k has two users (k.T and the mm) that join in one node: one region, not a cut at k, so
    # the Gram of the Khatri-Rao product is derived as (aᵀa) ∘ (bᵀb)
    def gram(a, b):
        k = (a[:, None, :] * b[None, :, :]).reshape(-1, a.shape[1])
        return k.T @ k

    # a budget for a loaded 2-core box: the test is about what is found, not how fast
    f = ollie.optimize(gram, inductor=False, budget_s=8, measure_cap_s=0.05, cache_dir=tmp_path)
    # sizes where the derived form's lead (~50× fewer multiply-adds) is far beyond the noise
    # of a 0.05 s measurement (at 64 × 16 and 48 × 16 the original was kept once)
    a, b = torch.randn(128, 32), torch.randn(96, 32)
    with torch.no_grad():
        assert torch.allclose(f(a, b), gram(a, b), rtol=1e-4, atol=1e-3)
    (report,) = regions(f)
    assert "aten.mul" in report.ops and "aten.mm" in report.ops
    largest = max(ir.analysis.iteration_points(s) for s in ir.sub_scopes(report.chosen))
    assert largest < 128 * 96 * 32 * 32, report.chosen  # the 12288 × 32 k is never formed
