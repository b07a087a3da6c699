"""Precompiled functions: ``aot_compile`` with the neuron backend, ``reference.precompile`` and
``reference.load_precompiled``, and every bad file refused with a typed error naming the file.

One function and one module are compiled once for the module (real torch-mlir, IREE and
processes); the bad files are made from the good one.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys

import pytest
import torch

import reference
from reference.backends import precompiled_file
from reference.backends import graph_record, serializable
from reference.backends.serializable import NeuronSerializableCallable
from reference.cache.key import tool_versions

pytestmark = pytest.mark.xdist_group("precompiled")


def _step(x, cache):
    cache.mul_(0.5).add_(x)  # writes into its input, as a decoder's KV cache does
    return torch.relu(x) * 2 + cache


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8)).eval()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("precompiled")
    x, cache = torch.randn(2, 8), torch.randn(2, 8)
    with torch.no_grad():
        fn = reference.precompile(_step, (x, cache.clone()), tmp / "step.pf")
        mod = reference.precompile(_model(), [(torch.randn(2, 8),), (torch.randn(4, 8),)], tmp / "model.pf")
    return tmp, fn, mod


def _copy(files, name: str, data: bytes) -> str:
    tmp = files[0]
    path = tmp / name
    path.write_bytes(data)
    return str(path)


def test_precompile_returns_what_load_gives_back_and_both_match_eager(files):
    tmp, fn, mod = files
    x, cache = torch.randn(2, 8), torch.randn(2, 8)
    expected_cache = cache.clone()
    expected = _step(x, expected_cache)
    loaded = reference.load_precompiled(tmp / "step.pf")
    with torch.no_grad():
        got = loaded(x, cache)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(cache, expected_cache)  # the write reached the caller's tensor
    model = _model()
    loaded_mod = reference.load_precompiled(tmp / "model.pf", module=model)
    assert loaded_mod.variants == 2
    with torch.no_grad():
        for rows in (2, 4):
            inp = torch.randn(rows, 8)
            torch.testing.assert_close(loaded_mod(inp), model(inp))
            torch.testing.assert_close(mod(inp), model(inp))


def test_a_loaded_module_reads_the_weights_of_the_module_it_is_given(files):
    tmp = files[0]
    other = _model()
    with torch.no_grad():
        other[0].weight.mul_(-1)
        inp = torch.randn(2, 8)
        got = reference.load_precompiled(tmp / "model.pf", module=other)(inp)
        torch.testing.assert_close(got, other(inp))


def test_a_module_file_needs_its_module_and_a_function_file_refuses_one(files):
    tmp = files[0]
    with pytest.raises(reference.BackendOptionError, match="module=model"):
        reference.load_precompiled(tmp / "model.pf")
    with pytest.raises(reference.BackendOptionError, match="without module="):
        reference.load_precompiled(tmp / "step.pf", module=_model())


def test_inputs_the_guards_refuse_raise_a_typed_error_naming_the_file(files):
    tmp = files[0]
    loaded = reference.load_precompiled(tmp / "model.pf", module=_model())
    with torch.no_grad(), pytest.raises(reference.PrecompiledInputError) as info:
        loaded(torch.randn(3, 8))
    assert str(tmp / "model.pf") in str(info.value) and "size mismatch" in str(info.value)
    with pytest.raises(reference.PrecompiledInputError, match="grad_mode"):  # compiled under no_grad
        loaded(torch.randn(2, 8))


def test_a_truncated_file_is_refused_before_anything_is_unpickled(files):
    data = (files[0] / "step.pf").read_bytes()
    for cut in (5, 40, len(data) - 10):
        path = _copy(files, f"cut{cut}.pf", data[:cut])
        with pytest.raises(reference.PrecompiledIntegrityError) as info:
            reference.load_precompiled(path)
        assert path in str(info.value)


def test_an_altered_variant_is_refused_by_its_checksum(files):
    data = bytearray((files[0] / "step.pf").read_bytes())
    data[-100] ^= 0xFF
    path = _copy(files, "flipped.pf", bytes(data))
    with pytest.raises(reference.PrecompiledIntegrityError, match="checksum"):
        reference.load_precompiled(path)


def _rewrite(files, name: str, edit) -> str:
    """The step file with its description edited by ``edit(doc)`` (no HMAC: unsigned)."""
    data = (files[0] / "step.pf").read_bytes()
    head = precompiled_file._HEAD
    _, fmt, n = head.unpack_from(data)
    doc = json.loads(data[head.size:head.size + n])
    edit(doc)
    text = json.dumps(doc).encode()
    return _copy(files, name, head.pack(precompiled_file.FILE_MAGIC, fmt, len(text)) + text + data[head.size + n:])


def test_a_file_from_another_torch_or_reference_version_is_refused(files):
    for field in ("torch", "reference", "runtime"):
        path = _rewrite(files, f"v-{field}.pf", lambda d, f=field: d["versions"].__setitem__(f, "0.0.1"))
        with pytest.raises(reference.PrecompiledVersionError) as info:
            reference.load_precompiled(path)
        assert path in str(info.value) and f"{field} '0.0.1'" in str(info.value)


@pytest.fixture
def versions_again():
    """``tool_versions`` is read once per process: read it again here and after the test."""
    tool_versions.cache_clear()
    yield
    tool_versions.cache_clear()


def test_a_file_built_for_another_cpu_is_refused(files, monkeypatch, versions_again):
    monkeypatch.setenv("NEURON_REFERENCE_HOST_IDENTITY", "riscv64:some other cpu")
    with pytest.raises(reference.PrecompiledTargetError, match="riscv64:some other cpu") as info:
        reference.load_precompiled(files[0] / "step.pf")
    assert str(files[0] / "step.pf") in str(info.value)


def test_not_a_precompiled_file_is_refused(files):
    path = _copy(files, "other.pf", b"PK\x03\x04 not ours at all" * 4)
    with pytest.raises(reference.PrecompiledIntegrityError, match="not a precompiled neuron file"):
        reference.load_precompiled(path)
    with pytest.raises(reference.PrecompiledFileError, match="cannot be read"):
        reference.load_precompiled(files[0] / "missing.pf")


class _Planted:
    """A pickle that, if ever unpickled, leaves a mark: the proof that a refused file ran nothing."""

    def __init__(self, mark: str) -> None:
        self.mark = mark

    def __reduce__(self):
        return (open, (self.mark, "w"))


def _planted_file(files, mark: str, key: str | None) -> str:
    """A well-formed file whose one variant is a planted pickle, with matching checksums (and an
    HMAC under ``key`` when given)."""
    import hashlib

    from reference.cache.auth import sign

    blob = pickle.dumps(_Planted(mark))
    versions = dict(tool_versions())
    desc = precompiled_file._Description("function", versions, (len(blob),), (hashlib.sha256(blob).hexdigest(),), "neuron")
    doc = json.loads(desc.body())
    doc["hmac_sha256"] = sign(key.encode(), precompiled_file.FILE_MAGIC, desc.body(), blob) if key else None
    text = json.dumps(doc).encode()
    head = precompiled_file._HEAD.pack(precompiled_file.FILE_MAGIC, precompiled_file.FILE_FORMAT, len(text))
    return _copy(files, f"planted-{bool(key)}.pf", head + text + blob)


def test_with_the_hmac_key_set_an_unsigned_file_is_refused_before_unpickling(files, monkeypatch):
    mark = str(files[0] / "planted-ran")
    path = _planted_file(files, mark, key=None)
    monkeypatch.setenv("TORCH_NEURONX_CACHE_HMAC_KEY", "a secret")
    with pytest.raises(reference.PrecompiledIntegrityError, match="HMAC") as info:
        reference.load_precompiled(path)
    assert path in str(info.value)
    assert not os.path.exists(mark), "the refused file's pickle ran"
    # the good file, written without the key, is refused too while the key is set
    with pytest.raises(reference.PrecompiledIntegrityError, match="HMAC"):
        reference.load_precompiled(files[0] / "step.pf")


def test_without_a_key_a_file_is_code_as_the_docs_say(files):
    """What docs/caching.md warns of: without the key, checksums catch damage, not intent."""
    mark = str(files[0] / "planted-ran-unsigned")
    path = _planted_file(files, mark, key=None)
    with pytest.raises(reference.PrecompiledIntegrityError):
        reference.load_precompiled(path)  # not a compiled function...
    assert os.path.exists(mark)  # ...but its pickle ran


@pytest.mark.slow  # a compile into caches of its own (about 3 s); the refusal without a signature stays in the default lane
def test_a_signed_file_loads_under_its_key_and_an_altered_one_does_not(files, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_CACHE_HMAC_KEY", "another secret")
    for variable in ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_HLO_CACHE_DIR", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"):
        monkeypatch.setenv(variable, str(tmp_path / variable))  # caches of this key's own, not the run's unsigned ones
    x, cache = torch.randn(2, 8), torch.randn(2, 8)
    with torch.no_grad():
        reference.precompile(_step, (x, cache.clone()), tmp_path / "signed.pf")
        loaded = reference.load_precompiled(tmp_path / "signed.pf")
        torch.testing.assert_close(loaded(x, cache.clone()), _step(x, cache.clone()))
    data = (tmp_path / "signed.pf").read_bytes()
    altered = data.replace(b'"kind":"function"', b'"kind":"module"  ', 1)
    assert altered != data
    (tmp_path / "altered.pf").write_bytes(altered)
    with pytest.raises(reference.PrecompiledIntegrityError, match="HMAC"):
        reference.load_precompiled(tmp_path / "altered.pf", module=_model())


def test_the_graph_bytes_are_checked_before_the_artifact_is_loaded(files, monkeypatch):
    fn = files[1]._functions[0]._artifacts.compiled_fn
    assert isinstance(fn, NeuronSerializableCallable)
    data = NeuronSerializableCallable.serialize_compile_artifacts(fn)
    back = NeuronSerializableCallable.deserialize_compile_artifacts(data)
    assert back.record == fn.record
    with pytest.raises(reference.PrecompiledIntegrityError, match="truncated"):
        NeuronSerializableCallable.deserialize_compile_artifacts(data[:-7])
    with pytest.raises(reference.PrecompiledIntegrityError, match="not a compiled neuron graph"):
        NeuronSerializableCallable.deserialize_compile_artifacts(b"X" * 8 + data[8:])
    head = graph_record._HEAD
    magic, fmt, n = head.unpack_from(data)
    doc = json.loads(data[head.size:head.size + n])
    doc["versions"]["torch"] = "1.0.0"
    text = json.dumps(doc).encode()
    other = head.pack(magic, fmt, len(text)) + text + data[head.size + n:]
    with serializable.loading("/srv/models/step.pf"), pytest.raises(reference.PrecompiledVersionError) as info:
        NeuronSerializableCallable.deserialize_compile_artifacts(other)
    assert "/srv/models/step.pf" in str(info.value) and "torch '1.0.0'" in str(info.value)
    # saved without TORCH_NEURONX_CACHE_HMAC_KEY: refused while it is set (torch's own load path)
    monkeypatch.setenv("TORCH_NEURONX_CACHE_HMAC_KEY", "a secret")
    with pytest.raises(reference.PrecompiledIntegrityError, match="HMAC"):
        NeuronSerializableCallable.deserialize_compile_artifacts(data)


def test_a_graph_that_needs_gradients_cannot_be_precompiled(tmp_path):
    w = torch.randn(8, 8, requires_grad=True)
    with pytest.raises(reference.PrecompileError, match="cannot be precompiled"):
        reference.precompile(lambda x, w: (x @ w).sum(), (torch.randn(2, 8), w), tmp_path / "train.pf")
    assert not (tmp_path / "train.pf").exists()


_FRESH = r"""
import json, sys, torch
import reference
from reference.core.metrics import METRICS
x, cache = torch.ones(2, 8), torch.zeros(2, 8)
fn = reference.load_precompiled(sys.argv[1])
with torch.no_grad():
    out = fn(x, cache)
dynamo = "torch._dynamo" in sys.modules  # before this script's own import of Dynamo's counters, below
import torch._dynamo.utils as du
print(json.dumps({
    "dynamo": dynamo, "direct": fn.direct_variants,
    "out": out.tolist(), "cache": cache.tolist(),
    "modules": sorted(m for m in sys.modules if m.split(".")[0] == "torch_mlir" or m.startswith("iree.compiler")
                      or m.startswith(("reference.pipeline", "reference.backends.aot_seam", "reference.backends.neuron"))),
    "aot_autograd": "torch._functorch.aot_autograd" in sys.modules,  # AOT Autograd's entry point
    "frames": dict(du.counters["frames"]), "dynamo_metrics": sorted(du.compilation_time_metrics),
    "compiled_runs": METRICS.counters().get("compiled_runs", 0),
}))
"""


def test_a_fresh_process_runs_the_file_without_trace_lowering_compiler_or_caches(files, tmp_path):
    """Empty cache folders, no Dynamo trace, no AOT Autograd trace, neither torch-mlir nor the
    IREE compiler imported, and Dynamo not imported at all (the variant's direct form): the file alone."""
    empty = {v: str(tmp_path / v) for v in ("TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_HLO_CACHE_DIR",
                                            "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR")}
    proc = subprocess.run([sys.executable, "-c", _FRESH, str(files[0] / "step.pf")], capture_output=True, text=True,
                          env={**os.environ, **empty, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    x, cache = torch.ones(2, 8), torch.zeros(2, 8)
    expected = _step(x, cache)
    torch.testing.assert_close(torch.tensor(report["out"]), expected)
    torch.testing.assert_close(torch.tensor(report["cache"]), cache)
    assert report["modules"] == [], f"loading imported the compiler stack or the compile side: {report['modules']}"
    assert report["aot_autograd"] is False, "loading imported AOT Autograd's entry point"
    assert not report["frames"].get("total") and report["dynamo_metrics"] == [], report
    assert report["compiled_runs"] == 1
    assert not any(os.listdir(p) for p in empty.values() if os.path.isdir(p)), "loading wrote or needed the caches"
    assert report["direct"] == 1 and report["dynamo"] is False, report


def test_the_direct_forms_guards_hand_what_they_refuse_to_torchs_form(files):
    """A call the direct form's guards refuse goes to torch's form, whose Dynamo guards decide as
    before: grad mode on (compiled under no_grad), another row count, a hook, a module in training
    mode, a parameter whose data changed shape in place. A new parameter of the same kind is read."""
    tmp = files[0]
    model = _model()
    loaded = reference.load_precompiled(tmp / "model.pf", module=model)
    assert loaded.direct_variants == 2
    direct = loaded._direct[0]
    x = torch.randn(2, 8)

    def refused(args, reason: str) -> None:
        # the check a call pays (accepts) and the one that explains (refusal) agree, twice over:
        # the first call after a change walks the whole module, a repeated one takes the quick path
        for _ in range(2):
            assert not direct.accepts(args, {}), reason
            assert reason in direct.refusal(args, {})

    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))  # the direct form: accepted
        assert direct.accepts((model, x), {}) and direct.refusal((model, x), {}) is None
        refused((model, x.clone().requires_grad_()), "requires_grad")
        with pytest.raises(reference.PrecompiledInputError):
            loaded(torch.randn(3, 8))  # no variant for 3 rows, in either form
        model[0].weight = torch.nn.Parameter(torch.randn(16, 8))  # a new parameter, same kind: read
        torch.testing.assert_close(loaded(x), model(x))
        assert direct.accepts((model, x), {})
        handle = model[1].register_forward_hook(lambda *a: None)
        refused((model, x), "hooks")
        handle.remove()
        assert direct.accepts((model, x), {})
        model.train()
        refused((model, x), "training=True")
        model.eval()
        assert direct.accepts((model, x), {})
        model[2].bias.data = torch.randn(9)  # same object, another shape: only the tensor check sees it
        refused((model, x), "(9,)")
        with pytest.raises(reference.PrecompiledInputError):
            loaded(x)
        model[2].bias.data = torch.randn(8)
        assert direct.accepts((model, x), {})
    refused((model, x), "grad=True")  # grad mode on here, nothing else changed


@pytest.mark.slow
def test_a_runners_graphs_precompiled_into_one_file_serve_its_sites(tmp_path):
    """``precompile_runner``: each graph type under its own policy scope, one file; a second runner
    loads it and its sites run without compiling (the decoder writes its KV caches as eager does)."""
    from types import SimpleNamespace

    from neuron_fixtures.policy import PolicyVLM
    from reference.compiler.scope import scoped_compiler_args
    from reference.runner import NeuronModelRunner, load_precompiled_runner, precompile_runner
    from reference.runner.opt_level import with_optimization_level

    helpers = SimpleNamespace(scoped_compiler_args=scoped_compiler_args, with_optimization_level=with_optimization_level)
    runner = NeuronModelRunner(PolicyVLM(helpers), compiler_args=["--model-type", "transformer"]).load_model()
    with torch.no_grad():
        made = precompile_runner(runner, tmp_path / "runner.pf", ("prefill", "decode"))
    prefill, decode = (f._artifacts.compiled_fn.record.compiler_args for f in made._functions)
    assert "-O3" in decode and "-O3" not in prefill, (prefill, decode)  # each under its own policy scope

    served = load_precompiled_runner(NeuronModelRunner(PolicyVLM(helpers), compiler_args=["--model-type", "transformer"]),
                                     tmp_path / "runner.pf")
    reference.reset_dynamo_metrics()
    for graph_type in ("prefill", "decode"):
        kwargs = served.model.example_kwargs(graph_type)
        eager_kwargs = copy.deepcopy(kwargs)
        with torch.no_grad():
            got = served.run_site(graph_type, **kwargs)
            expected = served.model(**eager_kwargs)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(kwargs["k_caches"], eager_kwargs["k_caches"], rtol=1e-4, atol=1e-4)
    assert reference.get_dynamo_metrics() == [], "serving from the file compiled a graph"
    with torch.no_grad(), pytest.raises(reference.PrecompiledInputError, match="runner.pf"):
        served.run_site("jf", **served.model.example_kwargs("jf"))  # a graph type the file does not hold


def test_a_variant_whose_code_needs_dynamo_travels_in_torchs_form_only_and_still_loads(tmp_path):
    """A traced function with a closure has no direct form: ``precompile`` says why in a warning,
    and the file loads (torch's form, deserialized at load as before) and matches eager."""
    scale = torch.full((2, 8), 3.0)

    def scaled(x):
        return torch.relu(x) * scale  # a closure cell: not in the direct form

    x = torch.randn(2, 8)
    with torch.no_grad(), pytest.warns(UserWarning, match="closure"):
        reference.precompile(scaled, (x,), tmp_path / "closure.pf")
    loaded = reference.load_precompiled(tmp_path / "closure.pf")
    assert loaded.direct_variants == 0 and loaded.variants == 1
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), scaled(x))
