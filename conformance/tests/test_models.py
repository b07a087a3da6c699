"""The model lane: small ``transformers`` architectures compiled through the adapter match eager.

Every model is built offline from its config class with seeded random weights
(``neuron_fixtures/hf_models.py``). Per model, through the implementation's ``torch_compile``:

- ``forward``: one forward in float32, compared with eager (encoders, vision, audio, seq2seq);
- ``decode``: decoders: prefill, then one decode step on a static KV cache, logits against eager;
- ``generate``: decoders: greedy ``generate()`` of 8 tokens with the compiled forward yields eager's
  tokens;
- ``bfloat16``: decoders: prefill and decode in bfloat16, logits within :data:`BF16_TOLERANCE` of
  eager bfloat16.

Each test records the number of graphs, the graph breaks (op and reason, from Dynamo's counters,
so any Dynamo backend reports them the same way), the largest error against eager and the time of
the first call (tracing and compiling included) for ``reports/<impl>/models.md``.

Every MoE model runs twice: with ``experts_implementation="batched_mm"`` (no break) and with the
library's default experts (``<name>_default_experts``), whose ops an implementation cannot compile
break the graph: the report names them (for the reference: ``histc``, and in bfloat16
``_grouped_mm``; it lowers ``transformers::grouped_mm_fallback``), and the parts still
match eager.

``make test`` runs the parts listed in :data:`IN_MAKE_TEST` (the cheapest models and the MoE
decoder whose router uses ``topk``); ``make models`` (``CONFORMANCE_MODELS=all``) runs all.
"""

from __future__ import annotations

import re
import time

import pytest
import torch

from conformance.reporting import models_report
from conformance.harness.env import all_models
from conformance.harness.tolerances import tolerance

hf = pytest.importorskip("neuron_fixtures.hf_models")
pytest.importorskip("transformers", reason="the model lane needs the 'models' extra (make models)")

# A model that matches eager proves something only when the implementation's compiled path ran:
# a compiled call that ran its graph's ops as ATen kernels ends 'fell back: ran eagerly (...)'.
pytestmark = pytest.mark.evidence

#: (model, part) pairs run by ``make test``; the rest only with CONFORMANCE_MODELS=all.
IN_MAKE_TEST = {("bert", "forward"), ("resnet", "forward"), ("convnext", "forward"), ("mixtral", "decode")}

#: bfloat16 logits against eager bfloat16: both round every op to 8 mantissa bits, but in different
#: orders (the compiler fuses and reassociates), so logits of order one differ by a few bf16 ulps.
BF16_TOLERANCE = dict(rtol=5e-2, atol=1e-1)


def _selected(model: str, part: str) -> bool:
    return all_models() or (model, part) in IN_MAKE_TEST


def _params(kinds, part):
    params = []
    for spec in hf.MODELS:
        if spec.kind not in kinds:
            continue
        marks = [] if (spec.name, part) in IN_MAKE_TEST else [pytest.mark.slow]
        params.append(pytest.param(spec.name, id=spec.name, marks=marks))
    return params


@pytest.fixture
def lane(request, impl):
    """``lane(model, part)``: tags the test's row, skips a part this run does not select."""

    def start(model: str, part: str):
        models_report.tag(request.node, model, part)
        if not _selected(model, part):
            pytest.skip("run by make models (CONFORMANCE_MODELS=all)")
        return _Run(request.node, impl, model, part)

    return start


# The backend's diagnostic names the op (an ATen op's name or another namespace's qualified name,
# ns::op) and, after the call form, the reason.
_OP = re.compile(r"op=([\w.:]+)(?: \((?:[^()]|\(\))*\))?(?:: (.*))?")


class _Run:
    """One part of the lane for one model: compile through the adapter, time, count, compare."""

    def __init__(self, node, impl, model: str, part: str) -> None:
        self.node, self.impl, self.model, self.part = node, impl, model, part
        self.first_call_s: float | None = None
        self.max_error: float | None = None  # the largest difference from eager seen so far

    def compile(self, fn):
        from torch._dynamo.utils import counters

        self.impl.reset()
        self.impl.backend().reset_graph_count()
        counters["graph_break"].clear()
        compiled = self.impl.backend().torch_compile(fn)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = compiled(*args, **kwargs)
            if self.first_call_s is None:
                self.first_call_s = time.perf_counter() - start
            return out

        return timed

    def compare(self, got: torch.Tensor, want: torch.Tensor, what: str, **tol) -> None:
        err = (got.float() - want.float()).abs().max().item()
        self.max_error = err if self.max_error is None else max(self.max_error, err)
        rtol, atol = tolerance(want.dtype) if not tol else (tol["rtol"], tol["atol"])
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{self.model} {what}: {m}")

    def breaks(self) -> list[str]:
        from torch._dynamo.utils import counters

        found = []
        for reason in counters["graph_break"]:
            first = str(reason).strip().splitlines()[0]
            op = _OP.search(str(reason))
            found.append(f"{op.group(1)}: {(op.group(2) or first)[:100]}" if op else first[:120])
        return sorted(found)

    def record(self, ok: bool, note: str = "") -> None:
        models_report.record(
            self.node, self.model, self.part, ok=ok, graphs=self.impl.backend().graph_count(), breaks=self.breaks(),
            max_error=self.max_error, first_call_s=self.first_call_s, note=note,
        )


def _main_output(out):
    for name in ("logits", "last_hidden_state", "pooler_output"):
        value = getattr(out, name, None)
        if isinstance(value, torch.Tensor):
            return name, value
    raise AssertionError(f"no tensor output in {type(out).__name__}")


@pytest.mark.parametrize("model", _params({"encoder", "vision", "audio", "ssm", "seq2seq"}, "forward"))
def test_forward_matches_eager(lane, model):
    run = lane(model, "forward")
    spec = hf.BY_NAME[model]
    net, inputs = spec.build(), spec.inputs()
    with torch.no_grad():
        want = net(**inputs)
        got = run.compile(net.forward)(**inputs)
    name, value = _main_output(want)
    ok = False
    try:
        run.compare(getattr(got, name), value, name)
        if name == "last_hidden_state" and getattr(want, "pooler_output", None) is not None:
            run.compare(got.pooler_output, want.pooler_output, "pooler_output")
        ok = True
    finally:
        run.record(ok)
    assert run.impl.backend().graph_count() >= 1, "nothing was compiled"


def _decode_part(lane, model: str, part: str, dtype: torch.dtype = torch.float32, **tol) -> None:
    """Prefill and one decode step on a static cache, compiled and eager, logits compared."""
    run = lane(model, part)
    spec = hf.BY_NAME[model]
    net, ids = spec.build(dtype), spec.inputs()["input_ids"]
    ok = False
    try:
        want_prefill, want_step = hf.prefill_and_decode(net.forward, net, ids)
        got_prefill, got_step = hf.prefill_and_decode(run.compile(net.forward), net, ids)
        run.compare(got_prefill, want_prefill, "prefill logits", **tol)
        run.compare(got_step, want_step, "decode-step logits", **tol)
        ok = True
    finally:
        run.record(ok)


@pytest.mark.parametrize("model", _params({"decoder"}, "decode"))
def test_decoder_prefill_and_decode_step_match_eager(lane, model):
    _decode_part(lane, model, "decode")


@pytest.mark.parametrize("model", _params({"decoder"}, "generate"))
def test_greedy_generate_with_the_compiled_model_gives_eagers_tokens(lane, model):
    run = lane(model, "generate")
    spec = hf.BY_NAME[model]
    net, ids = spec.build(), spec.inputs()["input_ids"]
    want = hf.greedy_generate(net, ids)
    got = hf.greedy_generate(net, ids, forward=run.compile(net.forward))
    ok = torch.equal(got, want)
    run.record(ok, "" if ok else f"tokens {got[0, ids.shape[1]:].tolist()} vs eager {want[0, ids.shape[1]:].tolist()}")
    assert got.shape[1] - ids.shape[1] >= hf.NEW_TOKENS
    assert ok, f"{model}: compiled generate gave {got.tolist()}, eager {want.tolist()}"


@pytest.mark.parametrize("model", _params({"decoder"}, "bfloat16"))
def test_decoder_in_bfloat16_matches_eager_within_the_stated_tolerance(lane, model):
    _decode_part(lane, model, "bfloat16", torch.bfloat16, **BF16_TOLERANCE)


#: Models of the suite's own (``neuron_fixtures/models.py``) with one op that a stack built on
#: torch-mlir and IREE cannot take, and the ATen op it is: IREE's CPU compiler rejects the grouped,
#: dilated, strided convolution of the depthwise network; torch-mlir has no lowering for
#: antialiased bilinear interpolation. An implementation that cannot compile the op must run it
#: outside its compiled graph, by a break that names it, and still match eager.
SPLIT_MODELS = {
    "depthwise_vision": ("DepthwiseVisionNet", "aten.convolution"),
    "antialiased_pool": ("AntialiasedPoolNet", "aten._upsample_bilinear2d_aa"),
}


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(SPLIT_MODELS))
def test_a_model_with_an_op_the_stack_cannot_compile_matches_eager_and_names_the_op(lane, model):
    from neuron_fixtures import models as fixtures

    run = lane(model, "forward")
    cls, op = SPLIT_MODELS[model]
    net = fixtures.init_deterministic(getattr(fixtures, cls)(), seed=3)
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    ok = False
    try:
        with torch.no_grad():
            want = net(pixels)
            got = run.compile(net)(pixels)
        run.compare(got, want, "logits")
        ok = True
    finally:
        run.record(ok)
    assert run.impl.backend().graph_count() >= 1, "nothing was compiled"
    # an implementation that compiles the op has no break to show; one that broke the graph broke it there
    breaks = run.breaks()
    assert not breaks or any(b.startswith(op) for b in breaks), f"{model}: the graph broke at {breaks}, not at {op}"
