"""Rate-In under ``torch.compile`` (review 68): the rate search runs eagerly, one graph break per search, with the
rates and maps it gave before; no warnings filter is touched while it runs (a loss function's warnings reach the
caller, and the search's own warnings are said by their callers instead of being filtered by their text)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from monai_unc.inferers import RateInInferer, search_dropout_rate
from monai_unc.inferers.rate_in import RateInDropout, find_rate_in_layers

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile not available")


@pytest.fixture
def fresh_dynamo():
    """Compiled code and graph-break counts of other tests neither serve nor outlive this one."""
    torch.compiler.reset()
    counters.clear()
    try:
        yield
    finally:
        torch.compiler.reset()
        counters.clear()


def _layers_net() -> nn.Module:
    """Two Rate-In layers in search mode: channel-wise Gaussian MI, then element-wise relative MSE."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), RateInDropout(0.1, 0.1, loss="mi"), nn.ReLU(),
                         nn.Conv3d(4, 4, 3, padding=1), RateInDropout(0.1, 0.1, loss="mse", channelwise=False),
                         nn.Conv3d(4, 3, 1)).train()


def _image(batch: int = 2) -> torch.Tensor:
    return torch.rand(batch, 1, 8, 8, 8, generator=torch.Generator().manual_seed(1))


def _run_layers(compiled: bool) -> tuple[list[list[float]], torch.Tensor]:
    net = _layers_net()
    fn = torch.compile(net, backend="eager") if compiled else net
    torch.manual_seed(5)
    with torch.no_grad():
        y = fn(_image())
    return [layer.rates.tolist() for _, layer in find_rate_in_layers(net)], y


def _close(got: list[float] | float, hexes: list[str] | str) -> bool:
    """Equal to the pinned values (``float.hex``, computed by the code before review 68) within ``1e-5`` relative:
    the same draws and search steps; other CPUs' kernels may differ in the last bits, another draw or step by far
    more."""
    want = [float.fromhex(h) for h in hexes] if isinstance(hexes, list) else float.fromhex(hexes)
    return got == pytest.approx(want, rel=1e-5, abs=1e-7)


def test_rates_and_maps_are_those_of_the_traced_search(fresh_dynamo) -> None:
    """Pinned on the code before review 68 (the search traced by dynamo, piece by piece): the same rates and outputs
    (bit for bit on the CPU that pinned them; within ``1e-5`` here, for other CPUs' kernels), eager and compiled
    (``eager`` backend: the same kernels and random stream). The inferer's maps are pinned
    uncompiled; test_compiled_networks.py checks that a compiled network gives the maps of the plain one."""
    for compiled in (False, True):
        rates, y = _run_layers(compiled)
        assert _close(rates[0], ["0x1.6e06869dd5ad4p-4", "0x1.149bbdff24a76p-4"]), (compiled, rates)
        assert _close(rates[1], ["0x1.999999999999ap-4", "0x1.a6f54008dd1d7p-4"]), (compiled, rates)
        assert _close(float(y.double().sum()), "-0x1.e2a2a1c360000p+9"), compiled
        assert _close(float(y[1, 2, 3, 4, 5]), "-0x1.77316e0000000p-3"), compiled
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.Dropout3d(0.2), nn.Conv3d(4, 3, 1)).eval()
    out = RateInInferer(num_samples=3, target_loss=0.1, seed=0)(_image(1), net)
    assert list(out.extras["rate_in_rates"]) == ["1"]
    assert _close(out.extras["rate_in_rates"]["1"].tolist(), ["0x1.182b3e0000000p-3"])
    assert _close(float(out["pred"].double().sum()), "0x1.fffffff600000p+8")
    assert _close(float(out["pred"][0, 1, 2, 3, 4]), "0x1.3d81a80000000p-2")


def test_the_search_breaks_a_compiled_graph_only_where_it_is_called(fresh_dynamo) -> None:
    """Traced, the search broke the graph at every host decision (``Tensor.item()``: the finite-map check, the
    Cholesky fallback) and at every ``warnings.catch_warnings`` (the loss's warnings silenced per draw, the search's
    own "not reached" warning filtered by its text): 12 breaks and 18 graphs on this two-layer network. Run eagerly
    (``torch.compiler.disable``), a search is one break, counted twice here (in ``nn.Sequential``'s loop over its
    modules, which dynamo then runs eagerly, and in the layer's own frame); the sampling passes break nowhere."""
    net = _layers_net()
    compiled = torch.compile(net, backend="eager")
    with torch.no_grad():
        compiled(_image())
        compiled(_image())  # the same input again: nothing compiles or breaks anew
    reasons = counters["graph_break"]
    assert reasons and all("_layer_search" in reason for reason in reasons), list(reasons)
    assert sum(reasons.values()) <= 2 * len(find_rate_in_layers(net)) == 4, dict(reasons)
    assert counters["stats"]["unique_graphs"] <= 2
    for _, layer in find_rate_in_layers(net):  # the sampling passes: no search, no break
        layer.mode = "fixed"
    counters.clear()
    with torch.no_grad():
        compiled(_image())
    assert not counters["graph_break"], dict(counters["graph_break"])


@pytest.mark.parametrize("share_passes", [False, True], ids=["full", "shared"])
def test_the_inferer_searches_on_the_uncompiled_module_and_samples_the_whole_compiled_graph(
    fresh_dynamo, share_passes: bool
) -> None:
    """The search pass ran through the compiled network: 10 graph breaks and 10 graphs of search pieces on this
    network, and the break inside ``nn.Sequential``'s loop made dynamo run the Sequential eagerly from then on, so the
    full sampling passes compiled only the dropout, never a convolution. The search pass now runs the network's Python
    module (the wrapper's ``_orig_mod``): no break, and the sampling passes compile the whole network, once."""
    graphs: list[list[str]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append([str(getattr(n.target, "__name__", n.target)) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.Dropout3d(0.2), nn.ReLU(), nn.Conv3d(4, 3, 1)).eval()
    compiled = torch.compile(net, backend=backend)
    kwargs = {"num_samples": 3, "target_loss": 0.1, "seed": 0, "share_passes": share_passes}
    ref = RateInInferer(**kwargs)(_image(1), net)
    inferer = RateInInferer(keep_layers=True, **kwargs)
    for _ in range(2):
        out = inferer(_image(1), compiled)
        assert torch.equal(out["pred"], ref["pred"])
        assert torch.equal(out.extras["rate_in_rates"]["1"], ref.extras["rate_in_rates"]["1"])
    assert not counters["graph_break"], dict(counters["graph_break"])
    # shared passes follow the calls of the Python module (nothing compiles); full passes compile the network once
    assert [any("conv3d" in op for op in g) for g in graphs] == ([] if share_passes else [True]), graphs
    inferer.release()


def _warning_loss(pre: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    """A caller's loss function that warns about its input, and records the warnings filters it runs under."""
    _warning_loss.filters.append(list(warnings.filters))
    warnings.warn("my loss: a channel is constant", UserWarning, stacklevel=2)
    a, b = pre.reshape(pre.shape[0], -1).double(), post.reshape(post.shape[0], -1).double()
    return ((a - b) ** 2).sum(1) / (a * a).sum(1)


_warning_loss.filters = []


@pytest.mark.parametrize("where", ["function", "layer"])
def test_a_loss_functions_warnings_reach_the_caller_and_no_filter_is_added(where: str) -> None:
    """Every UserWarning of the loss function was silenced, on every draw (``simplefilter("ignore")`` around the
    loss), and the layer's search added a filter on the text of the search's own warning; the loss ran under both."""
    x = torch.randn(2, 4, 4, 4, 4, generator=torch.Generator().manual_seed(0))
    _warning_loss.filters.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outer = list(warnings.filters)
        if where == "function":
            res = search_dropout_rate(x, _warning_loss, target_loss=0.2, max_iter=2, draws=1)
        else:
            layer = RateInDropout(0.2, 0.2, loss=_warning_loss, max_iter=2, draws=1).train()
            layer(x)
            res = layer.last_search
    assert [str(w.message) for w in caught] == ["my loss: a channel is constant"] * int(res.iterations.max())
    assert _warning_loss.filters and all(f == outer for f in _warning_loss.filters)


def test_the_search_pass_leaves_torch_s_process_wide_compile_stance_alone(fresh_dynamo) -> None:
    """Review 68 first ran the search pass under ``torch.compiler.set_stance("force_eager")``: one setting for the
    whole process, so every other thread's compiled models ran eagerly meanwhile, and two overlapping search passes
    restored it out of order, leaving the process eager for good. The search now calls the Python module instead."""
    eval_frame = pytest.importorskip("torch._dynamo.eval_frame")
    if not hasattr(eval_frame, "_stance"):
        pytest.skip("this torch has no compile stance")
    seen: list[str] = []

    def loss(pre: torch.Tensor, post: torch.Tensor) -> torch.Tensor:  # runs inside the search pass
        seen.append(eval_frame._stance.stance)
        a, b = pre.reshape(pre.shape[0], -1).double(), post.reshape(post.shape[0], -1).double()
        return ((a - b) ** 2).sum(1) / (a * a).sum(1)

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.Dropout3d(0.2), nn.Conv3d(4, 3, 1)).eval()
    compiled = torch.compile(net, backend="eager")
    out = RateInInferer(num_samples=2, target_loss=0.1, seed=0, loss=loss)(_image(1), compiled)
    assert out["pred"].shape[1] == 3
    assert seen and set(seen) == {"default"}, set(seen)
