"""Deliberately broken implementations: the reference with exactly one contract point broken.

Each mutant is an adapter factory usable as ``--impl conformance.selfcheck.mutants:<name>``. The
factory patches one function or method of the reference in the calling process, then returns the
reference adapter under the name ``selfcheck-<name>``. Child processes load the adapter by the
same ``--impl`` string, so the patch applies in them too; forked children inherit it.

Every mutant states the contract it breaks, the conformance tests expected to catch it (pytest node
ids, kept narrow so the whole lane stays cheap) and a pattern the failure text of at least one of
them must match: a test that fails for another reason (an import error, a timeout) does not count
as a kill. These are test doubles of the reference and nothing else: never use one as a backend.
"""

from __future__ import annotations

import contextlib
import functools

from conformance.adapters.reference import ReferenceImplementation
from conformance.selfcheck.mutant_registry import (  # noqa: F401 - re-exported: the suite's tools read them here
    MUTANTS, Mutant, MutantImplementation, _module, _mutant, make,
)


# Where the patched reference internals live (one place to update when the tree moves).
_CONFIG = "reference.core.settings"
_COMPILER_ARGS = "reference.compiler.scope"
_DRIVER = "reference.compiler.driver"
_ENV = "reference.core.env"
_GRAPH_BREAKS = "reference.backends.graph_breaks"
_CAPTURE = "reference.backends.capture"
_KEY = "reference.cache.key"
_NEFF_CACHE = "reference.cache.neff_cache"
_HLO_CACHE = "reference.cache.hlo_cache"
_GUARDS = "reference.spmd.guards"
_FX_PASSES = "reference.fx_passes"
_ATOM_CONFIG = "reference.atom.config"
_ATOM_DECORATORS = "reference.atom.decorators"
_SEAM = "reference.backends.neuron"

_SCOPE = "conformance/tests/test_compiler_args_scope.py"
_FLOWS = "conformance/tests/test_compiler_args_flows.py"
_KEYS = "conformance/tests/test_cache_key.py"
_RELIABILITY = "conformance/tests/test_cache_reliability.py"
_WARM = "conformance/tests/test_cache_warm_start.py"
_CONTRACT = "conformance/tests/test_backend_contract.py"
_CUSTOM_OPS = "conformance/tests/test_custom_ops.py"
_GUARD_TESTS = "conformance/tests/test_spmd_guards.py"
_FX_TESTS = "conformance/tests/test_fx_passes.py"
_ATOM_TESTS = "conformance/tests/test_atom_compilation.py"
_PARITY = "conformance/tests/test_eager_parity.py"


# --- per-graph compiler arguments -----------------------------------------------------------------


@_mutant("per-graph compiler arguments: the scope", f"{_SCOPE}::test_an_exception_inside_restores_the_scope", r"'-O3'")
def scope_leaks_out_of_an_exception():
    """``scoped_compiler_args`` restores the outer scope on a normal exit only, so an exception
    inside leaves its list in force for every later compile."""
    home = _module(_COMPILER_ARGS)
    var = home._scoped

    @contextlib.contextmanager
    def leaky(compiler_args):
        value = None if compiler_args is None else home._check_list(compiler_args, "scoped_compiler_args")
        token = var.set(value)
        yield
        var.reset(token)

    home.scoped_compiler_args = leaky


@_mutant("per-graph compiler arguments: the capture seam",
         f"{_FLOWS}::test_a_staged_graph_records_the_list_its_site_resolved", r"captured|staged metadata")
def capture_ignores_the_scope():
    """The capture seam stages every graph with the base arguments, dropping the list the compile
    site resolved, so ``parallel_compile`` later builds the wrong artifact."""
    home = _module(_CAPTURE)
    stage = home.stage_graph

    @functools.wraps(stage)
    def unscoped(lowered, ctx, **kwargs):
        import dataclasses

        base = _module(_DRIVER).CompilerConfig.from_args([a for a in ctx.config.args if a not in ("-O2", "-O3")])
        return stage(lowered, dataclasses.replace(ctx, config=base), **kwargs)

    home.stage_graph = unscoped


@_mutant("per-graph compiler arguments: levels reach the compiler",
         f"{_FLOWS}::test_optimization_levels_reach_the_compiler_and_give_equal_outputs[mlp]", r"identical artifacts at levels")
def optimization_level_ignored():
    """The driver validates ``-O`` levels and keys on them but always runs the compiler at ``-O1``."""
    config = _module(_DRIVER).CompilerConfig
    iree_args = config.iree_args

    @functools.wraps(iree_args)
    def at_o1(self):
        import dataclasses

        return iree_args(dataclasses.replace(self, optlevel=1))

    config.iree_args = at_o1


# --- compile cache: key, publication, locks, damage, switches ------------------------------------


@_mutant("compile cache: the key", f"{_KEYS}::test_replica_groups_change_the_key", r"groups.*: keys collide")
def key_ignores_replica_groups():
    """The cache key leaves out the collectives' replica groups, so two meshes share one artifact."""
    _module(_KEY)._groups_json = lambda groups: None


@_mutant("compile cache: damaged entries",
         tuple(f"{_RELIABILITY}::test_a_damaged_entry_is_never_executed_and_is_recompiled[{d}]"
               for d in ("flip_artifact_byte", "truncate_artifact")),
         # a damaged artifact that loads gives wrong numbers or a crash of the child that loaded it
         {"[flip_artifact_byte]": (r"damaged entry was used|the run after flip_artifact_byte|no warning names the evicted key",
                                   r"exited with -?\d+ and wrote no result"),
          "[truncate_artifact]": (r"damaged entry was used|the run after truncate_artifact|no warning names the evicted key",
                                  r"exited with -?\d+ and wrote no result")})
def cache_executes_a_damaged_entry():
    """The cache trusts its entries: a read skips the artifact's size and checksum, and an artifact
    the runtime then refuses is not evicted, so a damaged artifact is loaded and its failure reaches
    the user. (Either check alone hides the other's absence from a damaged entry: both go.)"""
    serving = _module("reference.pipeline.serving")

    def load_as_served(built, lowering, ctx, resident):
        return built, serving.load(built, lowering, resident=resident, driver=ctx.settings.runtime_driver)

    serving._load_or_rebuild = load_as_served
    home = _module(_NEFF_CACHE)
    get = home.NeffCache.get

    def trusting(self, key, *, evict=True):
        import os

        path = self.entry_dir(key)
        try:
            with open(os.path.join(path, home.METADATA_FILE), encoding="utf-8") as fh:
                meta = home.ArtifactMetadata.from_json(fh.read(), source=path)
            with open(os.path.join(path, os.path.basename(meta.artifact_file)), "rb") as fh:
                artifact = fh.read()
        except FileNotFoundError:
            return None
        except Exception:  # noqa: BLE001 - unreadable metadata: left to the reference
            return get(self, key, evict=evict)
        return home.CacheEntry(key, path, meta, artifact)  # size and checksum never compared

    home.NeffCache.get = trusting


@_mutant("compile cache: atomic publication", f"{_RELIABILITY}::test_a_write_cut_short_leaves_nothing_under_the_key",
         r"under the key|was published|temporary files")
def publication_not_atomic():
    """An entry is written straight into its final directory, so a write cut short leaves a partial
    entry under the key."""
    home = _module(_NEFF_CACHE)
    cache = home.NeffCache

    def in_place(self, key, artifact, metadata):
        import hashlib
        import os

        metadata.cache_key = key
        metadata.artifact_file = home.ARTIFACT_FILE
        metadata.artifact_size = len(artifact)
        metadata.artifact_sha256 = hashlib.sha256(artifact).hexdigest()
        metadata.extra.pop("metadata_sha256", None)
        metadata.extra["metadata_sha256"] = home._metadata_checksum(metadata)
        final = self.entry_dir(key)
        try:
            os.makedirs(final, exist_ok=True)
            home._write(os.path.join(final, home.ARTIFACT_FILE), artifact)
            home._write(os.path.join(final, home.METADATA_FILE), metadata.to_json().encode())
        except OSError as exc:
            raise home.CacheWriteError("NEFF cache entry", final, exc) from exc
        return home.CacheEntry(key, final, metadata, artifact)

    cache.put = in_place


@_mutant("compile cache: locks", f"{_RELIABILITY}::test_a_compile_that_fails_holding_the_lock_releases_it",
         r"retrying the graph whose compile failed")
def lock_kept_after_a_failed_compile():
    """A compile that raises keeps the key's lock until its process exits, so every retry of the
    graph waits for the lock timeout."""
    lock = _module(_NEFF_CACHE).CompileLock
    release = lock.release

    def exit_on_success(self, exc_type, exc, tb):
        if exc_type is None:
            release(self)

    lock.__exit__ = exit_on_success


@_mutant("compile cache: NEURON_LIBTORCH_ASSERT_CACHE_HIT", f"{_WARM}::test_assert_cache_hit_names_the_graph_key_on_a_miss",
         r"did not fail")
def assert_cache_hit_ignored():
    """``NEURON_LIBTORCH_ASSERT_CACHE_HIT=1`` is read but a miss compiles anyway."""
    env = _module(_ENV)
    get = env.get

    @functools.wraps(get)
    def without_assert(name, *args, **kwargs):
        return False if name == env.ASSERT_CACHE_HIT else get(name, *args, **kwargs)

    env.get = without_assert


@_mutant("compile cache: the HLO cache", f"{_WARM}::test_a_changed_fx_pass_pipeline_lowers_again",
         r"reused with the pass stage off")
def hlo_key_ignores_the_pass_pipeline():
    """The HLO-cache key leaves out the FX pass pipeline, so text lowered after one pipeline is
    served to another."""
    home = _module(_HLO_CACHE)
    key = home.create_hlo_cache_key

    @functools.wraps(key)
    def one_pipeline(gm, input_specs, pass_identity, versions=None, **kwargs):
        return key(gm, input_specs, "any-pipeline", versions, **kwargs)

    home.create_hlo_cache_key = one_pipeline


# --- backend contract: graph breaks, model names --------------------------------------------------


@_mutant("backend contract: forced graph breaks",
         f"{_CONTRACT}::test_sort_at_the_threshold_does_not_break_and_one_more_does[argsort]", r"DID NOT RAISE")
def no_break_under_fullgraph():
    """Forced graph breaks are skipped when Dynamo traces with ``fullgraph=True``, so an op the
    backend cannot compile reaches the compiler instead of raising ``Unsupported``."""
    home = _module(_GRAPH_BREAKS)
    check = home._check

    @functools.wraps(check)
    def lenient(tx, *args, **kwargs):
        if getattr(tx, "one_graph", False):
            return None
        return check(tx, *args, **kwargs)

    home._check = lenient


@_mutant("backend contract: ops of any namespace",
         f"{_CUSTOM_OPS}::test_under_fullgraph_a_custom_op_that_cannot_compile_raises_the_diagnostic_naming_it"
         "[custom_op_with_fake]", r"could not lower torch\.conformance_custom_ops\.scale_with_fake")
def unknown_namespaces_reach_the_compiler():
    """The graph-break rules decide ATen ops only: a custom op of another namespace with no lowering
    stays in the graph and reaches the compiler, which fails the compile."""
    home = _module(_GRAPH_BREAKS)
    decision = home._decision

    @functools.wraps(decision)
    def aten_only(target, name, values, kwargs):
        if isinstance(target, (home.OpOverload, home.OpOverloadPacket)) and home.namespace_of(target) != "aten":
            return None
        return decision(target, name, values, kwargs)

    home._decision = aten_only


@_mutant("backend contract: the sort threshold",
         f"{_CONTRACT}::test_sort_at_the_threshold_does_not_break_and_one_more_does[argsort]", r"exactly the threshold")
def sort_breaks_at_the_threshold():
    """``sort``/``argsort`` break when the sorted dimension has the threshold's number of elements
    (``>=`` where the seeds say more than)."""
    home = _module(_GRAPH_BREAKS)
    decide = home.decide

    @functools.wraps(decide)
    def off_by_one(name, args, kwargs):
        if name in ("sort", "argsort") and args and getattr(args[0], "shape", None):
            n = int(args[0].shape[-1])
            if n == home.THRESHOLDS.get("sort"):
                return home.BreakDecision(name, f"the sorted dimension has {n} elements")
        return decide(name, args, kwargs)

    home.decide = off_by_one


@_mutant("backend contract: the topk threshold",
         f"{_CONTRACT}::test_topk_below_the_threshold_does_not_break_and_at_it_does", r"\(the threshold\) was compiled")
def topk_compiles_at_the_threshold():
    """``topk`` breaks only when k is larger than the threshold (``>`` where the seeds say ``>=``)."""
    home = _module(_GRAPH_BREAKS)
    decide = home.decide

    @functools.wraps(decide)
    def off_by_one(name, args, kwargs):
        if name == "topk":
            k = kwargs.get("k", args[1] if len(args) > 1 else None)
            if k == home.THRESHOLDS.get("topk"):
                return None
        return decide(name, args, kwargs)

    home.decide = off_by_one


@_mutant("backend contract: model names", f"{_CONTRACT}::test_a_model_name_never_leaves_the_artifact_directories",
         r"graph names|outside the debug and cache directories|graph name .* would leave")
def model_name_not_sanitized():
    """``set_model_name`` keeps the name as given, so ``/`` and ``..`` reach graph names and paths."""
    _module(_CONFIG).sanitize_name = lambda name: name


# --- SPMD guard rails -----------------------------------------------------------------------------


@_mutant("SPMD guard rails: strict mode",
         f"{_GUARD_TESTS}::test_a_baked_rank_constant_is_caught_for_every_builder[strict-torch.tensor]", r"DID NOT RAISE")
def guard_never_goes_strict():
    """``NEURON_LIBTORCH_SPMD_STRICT=1`` is ignored: the guard rails always only warn."""
    guards, passes = _module(_GUARDS), _module("reference.fx_passes.spmd_passes")
    for home, name in ((guards, "check_rank_constants"), (passes, "check_rank_constants"), (guards, "check_single_artifact")):
        real = getattr(home, name)

        @functools.wraps(real)
        def lenient(*args, _real=real, strict, **kwargs):
            return _real(*args, strict=False, **kwargs)

        setattr(home, name, lenient)


@_mutant("SPMD guard rails: strict mode whatever the fallback",
         f"{_GUARD_TESTS}::test_strict_holds_at_every_seam_whatever_the_fallback[strict-fallback_on-neuron]",
         r"DID NOT RAISE")
def strict_violation_falls_back():
    """The pass manager reports a guard-rail violation as an ordinary failing pass (``FXPassError``),
    so with the eager fallback on a violation under the strict flag runs the graph eagerly."""
    fx, errors = _module(_FX_PASSES), _module("reference.spmd.errors")
    original = fx.FXPassManager.run_passes

    def run_passes(self, gm, **kwargs):
        try:
            return original(self, gm, **kwargs)
        except errors.SPMDViolationError as exc:
            raise fx.FXPassError("RankConstantCheckPass", kwargs.get("graph_name", "<graph>"), str(exc)) from exc

    fx.FXPassManager.run_passes = run_passes


@_mutant("SPMD guard rails: constant builders",
         f"{_GUARD_TESTS}::test_a_baked_rank_constant_is_caught_for_every_builder[warn-torch.full]", r"DID NOT WARN")
def guard_misses_torch_full():
    """The rank-constant check knows ``torch.tensor`` but not ``torch.full``."""
    builders = _module(_GUARDS)._CONSTANT_BUILDERS
    builders.discard("full")


@_mutant("SPMD guard rails: the single-artifact check",
         f"{_GUARD_TESTS}::test_single_artifact_check_names_the_splinters", r"DID NOT WARN|DID NOT RAISE")
def splinters_not_detected():
    """The single-artifact check counts ranks per hash directory wrongly and never finds a splinter."""
    _module(_GUARDS).find_splinters = lambda staged: []


# --- FX passes ------------------------------------------------------------------------------------


@_mutant("FX passes: the pipeline identity", f"{_FX_TESTS}::test_identity_changes_when_a_pass_is_added_removed_or_reordered",
         r"reordering changes it")
def pass_identity_ignores_order():
    """The pass manager's identity digests the set of passes, not their order."""
    import hashlib

    manager = _module(_FX_PASSES).FXPassManager
    manager.uuid = lambda self: hashlib.sha256("\n".join(sorted(self.identity())).encode()).hexdigest()[:16]


# --- execution evidence ----------------------------------------------------------------------------


@_mutant("execution evidence: no silent fallback", f"{_PARITY}::test_float_dtypes_match_eager[float16]",
         r"fell back: (ran eagerly: graph|.*compiled or served only 0)")
def float16_silently_runs_eagerly():
    """A graph with a float16 input is run eagerly instead of compiled, with no warning and no
    record (as a backend whose compiler lacks a dtype and quietly hands the graph back), so parity
    with eager holds while the implementation ran nothing."""
    import torch

    home = _module(_SEAM)
    compile_fx_graph = home.compile_fx_graph

    @functools.wraps(compile_fx_graph)
    def quietly_eager(gm, example_inputs, options, **kwargs):
        if any(isinstance(x, torch.Tensor) and x.dtype == torch.float16 for x in example_inputs):
            return gm.forward
        return compile_fx_graph(gm, example_inputs, options, **kwargs)

    home.compile_fx_graph = quietly_eager


def _without_own_evidence() -> None:
    """The reference adapter reports nothing of its own (as an adapter without evidence hooks
    does): what the suite sees is only what its observer sees."""
    from conformance.harness.implementation import Implementation

    ReferenceImplementation.evidence = Implementation.evidence  # type: ignore[method-assign]


_OBSERVED = (f"{_PARITY}::test_compiled_matches_eager[mlp]", "conformance/tests/test_ops.py::test_op_matches_eager[atanh-float32]",
             "conformance/tests/test_training.py::test_sgd_training_matches_eager[mlp]",
             f"{_CUSTOM_OPS}::test_a_custom_op_with_a_decomposition_that_compiles_stays_in_one_graph[composite_gelu]")


@_mutant("execution evidence: what ran, seen without the adapter's help", _OBSERVED, r"fell back'?: ran eagerly")
def every_graph_returned_unchanged():
    """The backend hands every graph back unchanged (``return gm.forward``) and its adapter
    reports no evidence of its own: parity with eager holds for every graph while nothing was
    compiled, and only the suite's own observer can tell."""
    home = _module(_SEAM)

    @functools.wraps(home.compile_fx_graph)
    def unchanged(gm, example_inputs, options, **kwargs):
        return gm.forward

    home.compile_fx_graph = unchanged
    _without_own_evidence()


@_mutant("execution evidence: every sample and graph, not only the first", _OBSERVED[:2], r"fell back'?: ran eagerly: graph")
def every_other_graph_returned_unchanged():
    """Every other graph the backend is handed is returned unchanged, the others compiled, and
    the adapter reports no evidence of its own: some graphs of a test ran compiled, so a verdict
    that asks only whether anything compiled passes it."""
    home = _module(_SEAM)
    compile_fx_graph = home.compile_fx_graph
    handed = [0]

    @functools.wraps(compile_fx_graph)
    def alternate(gm, example_inputs, options, **kwargs):
        handed[0] += 1
        if handed[0] % 2 == 0:
            return gm.forward
        return compile_fx_graph(gm, example_inputs, options, **kwargs)

    home.compile_fx_graph = alternate
    _without_own_evidence()


@_mutant("graph breaks: only by a declared rule", "conformance/tests/test_ops.py::test_op_matches_eager[median-float16]",
         r"undeclared graph break")
def breaks_match_no_declared_rule():
    """The backend's forced breaks carry a diagnostic type it does not declare
    (``forced_graph_breaks()`` still says ``Op not supported by the Neuron backend``): the op runs
    eagerly by a rule nobody can look up."""
    home = _module(_GRAPH_BREAKS)

    def undeclared(decision, form):
        home.graph_break(gb_type="Operator kept out of the graph", context=f"op={decision.op} ({form})",
                         explanation=decision.reason, hints=[])

    home._raise = undeclared


@_mutant("execution evidence: ATOM's pieces compiled",
         "conformance/tests/test_atom_matrix.py::test_prefill_and_every_decode_match_eager[L3-own-NONE-plain]",
         r"fell back: level 3: ran eagerly")
def atom_pieces_left_uncompiled():
    """ATOM's reference piece compiler hands every piece back unchanged: level 3 splits the graph
    and records its steps, every logit matches eager, and no piece was compiled."""
    adaptor = _module("reference.atom.compiler_interface").ReferenceAdaptor
    adaptor._compile = lambda self, graph, example_inputs, compiler_args, runtime_shape: graph.forward


# --- ATOM compilation ----------------------------------------------------------------------------


@_mutant("ATOM compilation: capture sizes", f"{_ATOM_TESTS}::test_level_3_capture_sizes_follow_the_seed",
         r"generated\.capture_sizes ==")
def ladder_stops_short():
    """The generated capture-size ladder for one ``cuda_graph_sizes`` value N stops below N
    (``range(16, N, 16)``), so the largest batch size is never captured."""
    home = _module(_ATOM_CONFIG)

    def short(largest: int) -> list[int]:
        return list(range(1, 9)) + list(range(16, largest, 16))

    home.default_capture_sizes = short


@_mutant("ATOM compilation: the compile decorator",
         f"{_ATOM_TESTS}::test_a_forward_that_reassigns_a_buffer_is_refused_at_first_compile", r"DID NOT RAISE")
def refused_code_is_kept():
    """A forward that updates a module buffer is refused at its first compile, but its compiled
    code is kept, so the next call runs it through the guard-free dispatcher."""
    cls = _module(_ATOM_DECORATORS).TorchCompileWrapperWithCustomDispatcher
    hook = cls.bytecode_hook

    @functools.wraps(hook)
    def keeps(self, old_code, new_code):
        if "update" in new_code.co_names:
            self.compiled_codes.append(new_code)
        return hook(self, old_code, new_code)

    cls.bytecode_hook = keeps


# --- ATOM: levels and graph modes through the runner ---------------------------------------------

_ATOM_RUNNER = "reference.atom.model_runner"
_ATOM_MATRIX = "conformance/tests/test_atom_matrix.py"


@_mutant("ATOM runner: use_cudagraph", f"{_ATOM_MATRIX}::test_use_cudagraph_false_captures_nothing_whatever_the_mode[L0]",
         r"\[1, 2, 4\] == \[\]")
def use_cudagraph_ignored():
    """The runner reads ``cudagraph_mode`` only: ``use_cudagraph=False`` still captures."""
    runner = _module(_ATOM_RUNNER).ModelRunner

    def graph_mode(self):
        if self.enforce_eager:
            return _module("reference.atom.graph_mode").CUDAGraphMode.NONE
        return self.config.compilation_config.cudagraph_mode

    runner.graph_mode = property(graph_mode)


@_mutant("ATOM runner: token graphs break at eager regions",
         f"{_ATOM_MATRIX}::test_token_graphs_run_the_attention_live_and_request_graphs_do_not[L0-TR_HYBRID]",
         r"did not run with the live metadata")
def token_graphs_do_not_break():
    """Token graphs record eager regions inline, as request graphs do: a replay runs the attention
    with the capture's metadata instead of the live step's."""
    home = _module("reference.atom.region_graph")
    new_recording = home.new_recording
    home.new_recording = lambda device, **kw: new_recording(device, **{**kw, "break_at_eager_regions": False})


@_mutant("ATOM runner: DP token buckets",
         f"{_ATOM_MATRIX}::test_a_dp_group_replays_the_bucket_of_its_largest_token_count_on_every_rank",
         r"not the group's bucket of 4")
def dp_ranks_pad_alone():
    """Each DP rank pads to the token bucket of the group's smallest count, not its largest, so the
    ranks of one step replay different buckets (their collectives would hang)."""
    mode = _module("reference.atom.forward_mode").ForwardMode
    pad = mode._pad_to_token_graph
    mode._pad_to_token_graph = staticmethod(lambda counts, buckets: pad([min(counts)], buckets))


@_mutant("ATOM runner: TBO microbatches",
         f"{_ATOM_MATRIX}::test_tbo_decode_splits_a_bucket_in_two_and_an_unserved_split_runs_eagerly", r"== \[3, 2\]")
def tbo_split_lopsided():
    """The two TBO microbatches are cut one request from the end instead of in half."""
    lopsided = lambda running_bs: (range(0, running_bs - 1), range(running_bs - 1, running_bs))  # noqa: E731
    for name in ("reference.atom.forward_mode", _ATOM_RUNNER):
        _module(name).decode_ubatch_request_ranges = lopsided


@_mutant("ATOM runner: level 1", f"{_ATOM_MATRIX}::test_only_level_0_runs_without_dynamo_and_level_1_is_compiled_by_the_runner[L1]",
         r"ran no Dynamo frame")
def level_1_runs_eagerly():
    """The runner leaves level 1 to the decorator, which does not compile it: the model runs eagerly."""
    _module(_ATOM_RUNNER).compile_model = lambda model, config: model


# --- between recorded pieces: the buffers a live region and the next piece share -----------------


@_mutant("ATOM runner: a live region's writes reach the next piece",
         f"{_ATOM_MATRIX}::test_prefill_and_every_decode_match_eager[L3-inductor-TR_HYBRID-plain]", r"batch size -> worst")
def live_region_writes_dropped():
    """A token graph's live region runs on private copies of its recorded inputs, so what it writes
    into a buffer it mutates (attention's ``output``) never reaches the next recorded piece; only
    what it returns is copied back."""
    rec = _module("reference.atom.recorder")
    replay = rec.CPURecording._replay

    def on_copies(self):
        saved = [(item, item.args) for item in self.launches if item.eager]
        for item, args in saved:
            item.args = rec.pytree.tree_map(lambda t: t.clone() if isinstance(t, rec.torch.Tensor) else t, args)
        try:
            replay(self)
        finally:
            for item, args in saved:
                item.args = args

    rec.CPURecording._replay = on_copies


@_mutant("ATOM runner: a replayed step is written where the recording reads",
         f"{_ATOM_MATRIX}::test_prefill_and_every_decode_match_eager[L3-inductor-TR_HYBRID-plain]", r"batch size -> worst")
def replay_reads_the_capture_step():
    """A replaying step's metadata is built in fresh tensors and the runner's buffers keep the
    capture's: a split op recorded inline (no eager region) reads the capture step's context
    lengths at every replay of a token graph."""
    runner = _module(_ATOM_RUNNER).ModelRunner

    def unstaged(self, input_ids, positions, context_lens):
        fv, rows = self.forward_vars, int(input_ids.shape[0])
        return fv["input_ids"][:rows].copy_(input_ids), fv["positions"][:rows].copy_(positions), context_lens

    runner._stage = unstaged


@_mutant("ATOM runner: padding rows hold padding",
         f"{_ATOM_MATRIX}::test_a_replayed_step_leaves_its_rows_then_padding_in_the_recorded_buffers[L0-FULL_AND_TR_HYBRID]",
         r"buffer holds the step, then token 0")
def padding_rows_left_stale():
    """A replaying step writes only its real rows into the runner's buffers: the padding rows of
    the bucket keep whatever an earlier step left there."""
    runner = _module(_ATOM_RUNNER).ModelRunner
    execute = runner.execute

    @functools.wraps(execute)
    def remember_rows(self, input_ids, *args, **kwargs):
        self._selfcheck_real_rows = int(input_ids.shape[0])
        return execute(self, input_ids, *args, **kwargs)

    def real_rows_only(self, input_ids, positions, context_lens):
        fv = self.forward_vars
        rows, real = int(input_ids.shape[0]), self._selfcheck_real_rows
        fv["input_ids"][:real].copy_(input_ids[:real])
        fv["positions"][:real].copy_(positions[:real])
        fv["context_lens"][: len(context_lens)].copy_(context_lens)
        return fv["input_ids"][:rows], fv["positions"][:rows], fv["context_lens"][: len(context_lens)]

    runner._stage = real_rows_only
    runner.execute = remember_rows


@_mutant("ATOM runner: a captured size replays its own bucket",
         f"{_ATOM_MATRIX}::test_each_step_reports_the_path_the_dispatch_rules_give_it[L0-FULL-plain]", r"reported, expected")
def exact_sizes_padded_up():
    """A decode whose batch size is a captured size is padded to the next captured size (when there
    is one) instead of replaying its own bucket: right logits, wasted rows on every such step."""
    import dataclasses

    mode = _module("reference.atom.forward_mode")
    decide = mode.ForwardMode.decide.__func__

    def padded_up(cls, graph_mode, *, capture_sizes=(), **kw):
        bs = kw.get("batch_size")
        bigger = [s for s in sorted(capture_sizes) if s > bs]
        if not kw.get("is_prefill") and bs in capture_sizes and bigger:
            kw["batch_size"] = bigger[0]
            chosen = decide(cls, graph_mode, capture_sizes=capture_sizes, **kw)
            return dataclasses.replace(chosen, batch_size=bs)
        return decide(cls, graph_mode, capture_sizes=capture_sizes, **kw)

    mode.ForwardMode.decide = classmethod(padded_up)


@_mutant("ATOM forward context: reset after an exception",
         f"{_ATOM_MATRIX}::test_an_exception_inside_a_step_leaves_no_forward_context_behind", r"stayed set")
def forward_context_kept_after_an_exception():
    """``in_forward_context`` resets the context when its block ends normally but not when the
    block raises, so a failed step's context stays in force."""
    fwd = _module("reference.atom.forward_context")

    @contextlib.contextmanager
    def leaky(*args, **kwargs):
        ctx = fwd.set_forward_context(*args, _depth=4, **kwargs)
        yield ctx
        fwd.reset_forward_context()

    for name in ("reference.atom.forward_context", "reference.atom", _ATOM_RUNNER):
        _module(name).in_forward_context = leaky


# --- one per contract module that had none: parity, HLO determinism, models, ATOM graph capture,
# --- resident weights, metrics, compile_only ------------------------------------------------------

_HLO_DETERMINISM = "conformance/tests/test_hlo_determinism.py"
_MODELS = "conformance/tests/test_models.py"
_ATOM_GRAPHS = "conformance/tests/test_atom_graphs.py"
_TRAINING = "conformance/tests/test_training.py"
_SUPPORT = "conformance/tests/test_backend_support.py"
_RUNTIME = "reference.runtime"


@_mutant("eager parity: integer results are exact", f"{_PARITY}::test_integer_and_bool_results_are_exact[int32]",
         r"int32 function\[0\]")
def floor_division_truncates():
    """Integer floor division is lowered as truncating division (C's ``/``), so ``(-7) // 2`` gives
    -3 instead of -4: every result with a negative quotient is one off."""
    import torch
    import torch_mlir.fx as tm_fx

    fx_import = tm_fx.stateless_fx_import
    aten = torch.ops.aten

    @functools.wraps(fx_import)
    def truncating(gm, *args, **kwargs):
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            if node.target is aten.floor_divide.default:
                node.target, node.kwargs = aten.div.Tensor_mode, {**node.kwargs, "rounding_mode": "trunc"}
            elif node.target in (aten.div.Tensor_mode, aten.div.Scalar_mode) and node.kwargs.get("rounding_mode") == "floor":
                node.kwargs = {**node.kwargs, "rounding_mode": "trunc"}
        return fx_import(gm, *args, **kwargs)

    tm_fx.stateless_fx_import = truncating


@_mutant("HLO determinism: no locations in the text", f"{_HLO_DETERMINISM}::test_text_has_no_paths_or_locations[mlp]",
         r"location or path fragments")
def lowering_keeps_source_locations():
    """The lowered StableHLO is printed with its debug locations (``loc("/path/file.py":12:0)``),
    so the text, and every cache key made from it, depends on where the model's source lives."""
    import torch_mlir.fx as tm_fx

    fx_import = tm_fx.stateless_fx_import

    class _Operation:
        def __init__(self, op):
            self._op = op

        def get_asm(self, **kwargs):
            return self._op.get_asm(**{**kwargs, "enable_debug_info": True})

        def __getattr__(self, name):
            return getattr(self._op, name)

    class _Module:
        def __init__(self, module):
            self._module, self.operation = module, _Operation(module.operation)

        def __getattr__(self, name):
            return getattr(self._module, name)

    @functools.wraps(fx_import)
    def with_locations(*args, **kwargs):
        return _Module(fx_import(*args, **kwargs))

    tm_fx.stateless_fx_import = with_locations


@_mutant("models: a real model matches eager", f"{_MODELS}::test_forward_matches_eager[bert]",
         r"bert (last_hidden_state|pooler_output)")
def layer_norm_uses_the_unbiased_variance():
    """A normalisation's variance (``var_mean`` with ``correction=0``, what LayerNorm decomposes
    into) is lowered with Bessel's correction, so every LayerNorm output is scaled by
    ``sqrt((n - 1) / n)``: a real model's hidden states drift by a few parts in a thousand."""
    import torch
    import torch_mlir.fx as tm_fx

    fx_import = tm_fx.stateless_fx_import
    var_mean = torch.ops.aten.var_mean.correction

    @functools.wraps(fx_import)
    def unbiased(gm, *args, **kwargs):
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is var_mean and node.kwargs.get("correction", 1) == 0:
                node.kwargs = {**node.kwargs, "correction": 1}
        return fx_import(gm, *args, **kwargs)

    tm_fx.stateless_fx_import = unbiased


@_mutant("ATOM graph capture: one shared pool", f"{_ATOM_GRAPHS}::test_every_graph_shares_one_pool",
         r"ReqGraph\(\)\.pool is")
def request_graphs_get_private_pools():
    """Each request graph records into a private pool of its own instead of the process's one
    pool, so the memory of all recordings adds up instead of being the largest one's."""
    home = _module("reference.atom.region_graph")
    req = home.ReqGraph
    init = req.__init__

    @functools.wraps(init)
    def private(self, name="req_graph", *, pool=None):
        init(self, name, pool=pool if pool is not None else home.GraphPool())

    req.__init__ = private


@_mutant("resident weights: in-place updates are seen", f"{_TRAINING}::test_sgd_training_matches_eager[mlp]",
         r"step|loss|parameter|weight")
def resident_weights_are_snapshots():
    """A parameter's device buffer is a copy taken at its first call and reused while the caller
    passes the same tensor, so an optimizer's in-place update is never seen by the compiled graph."""
    resident = _module(_RUNTIME)._Resident
    init = resident.__init__

    @functools.wraps(init)
    def snapshot(self, source, device):
        init(self, source.detach().clone(), device)
        self.source, self.ptr, self.copied, self.version = source, source.data_ptr(), False, None

    resident.__init__ = snapshot


@_mutant("metrics: one record per compiled graph", f"{_CONTRACT}::test_metrics_describe_every_compiled_graph",
         r"== 'contract_model'")
def metrics_ignore_the_model_name():
    """The metrics record every graph under the default model name, whatever ``set_model_name``
    said (the graph names still carry it)."""
    serving = _module("reference.pipeline.serving")  # serve() records each graph
    record = serving.record_graph_metrics

    @functools.wraps(record)
    def default_name(built, lowering, ctx):
        import dataclasses

        return record(built, lowering, dataclasses.replace(ctx, model_name="model_default"))

    serving.record_graph_metrics = default_name


@_mutant("compile_only: compiled, never run", f"{_SUPPORT}::test_var_compile_only", r"compiled path ran")
def compile_only_context_ignored():
    """``compile_only()`` is a context manager that does nothing: inside it graphs are compiled
    and their compiled code runs, as outside (the variable still works)."""
    import contextlib

    @contextlib.contextmanager
    def ignored():
        yield

    for name in ("reference", "reference.backends.api"):
        _module(name).compile_only = ignored


# --- adapters ---------------------------------------------------------------------------------------


@_mutant("op lane: one op, one dtype, against eager", "conformance/tests/test_ops.py::test_op_matches_eager[remainder-int64]",
         r"elements differ")
def remainder_truncates():
    """int64 ``remainder`` rounds toward zero (C's ``fmod``: the sign of the dividend, ``-7 % 3``
    is -1, not 2); floats and every other op are untouched."""
    import torch

    decompositions = _module("reference.lowering.decompositions")
    keep = decompositions.remainder

    @functools.wraps(keep)
    def truncating(x, other):
        if torch.result_type(x, other) == torch.int64:
            return x - other * torch.div(x, other, rounding_mode="trunc")
        return keep(x, other)

    decompositions.remainder = truncating


# --- numerics: edges of the dtypes, precision changes declared and announced ---------------------

_NUMERICS = "conformance/tests/test_numerics.py"


@_mutant("numerics at the edges: bfloat16's range",
         f"{_NUMERICS}::test_graphs_that_matter_in_models_match_eager_at_the_edges[bfloat16-beyond-float16-range]",
         r"bfloat16, beyond float16's range")
def bfloat16_through_float16():
    """Every bfloat16 input crosses into the runtime through a float16 round trip: exact for values
    of ``randn`` size (bfloat16's 8-bit mantissa fits float16's), but past 65504 a value becomes inf
    and below float16's normal range it loses its bits."""
    import torch

    runtime = _module(_RUNTIME)
    importable = runtime._importable

    @functools.wraps(importable)
    def through_float16(t):
        if t.dtype is torch.bfloat16:
            t = t.detach().to(torch.float16).to(torch.bfloat16)
        return importable(t)

    runtime._importable = through_float16


@_mutant("precision changes are announced",
         f"{_NUMERICS}::test_a_declared_precision_change_is_announced_when_it_happens[float64-as-float32]",
         r"without a warning naming both")
def float64_narrowed_silently():
    """float64 graphs are computed in float32, as declared, but without the warning that says so
    when a graph with float64 inputs or outputs is compiled or served."""
    serving = _module("reference.pipeline.serving")
    policy = serving.float64_policy

    @functools.wraps(policy)
    def silent(lowered, graph_name, policy_name="narrow"):
        if policy_name == "error":
            return policy(lowered, graph_name, policy_name)
        return None

    serving.float64_policy = silent


@_mutant("precision changes are declared",
         f"{_NUMERICS}::test_each_float_dtype_is_computed_as_declared[float64]", r"undeclared loss of precision")
def float64_narrowed_undeclared():
    """float64 graphs are computed in float32 with neither the declaration (``precision()`` says
    every dtype is computed as itself) nor the warning: a backend that does not know it narrows."""
    from conformance.adapters import reference as adapter
    from conformance.harness.precision import Precision

    MUTANTS["float64_narrowed_silently"].patch()
    adapter.PRECISION = Precision()


@_mutant("precompiled functions: a loaded graph writes into its inputs",
         "conformance/tests/test_load_compiled_function.py::test_a_fresh_process_loads_and_runs_the_compiled_function_without_tracing",
         r"not close|eager gives")
def precompiled_graph_forgets_its_input_writes():
    """The graph ``aot_compile`` saves records no written inputs: a loaded copy returns the written
    input's new value in place of the output and leaves the caller's tensor as it was."""
    import dataclasses

    aot_seam = _module("reference.backends.aot_seam")
    compile_serializable = aot_seam.compile_serializable

    @functools.wraps(compile_serializable)
    def forgetting(*args, **kwargs):
        fn = compile_serializable(*args, **kwargs)
        record = fn.record
        fn.record = dataclasses.replace(record, mutated_inputs=(), n_outputs=record.n_outputs + len(record.mutated_inputs))
        return fn

    aot_seam.compile_serializable = forgetting


# Per-statement mutants (one seed statement each, named by the catalogue's ``mutants = [...]``) live
# in modules of their own; importing them here makes each an attribute of this module, so
# ``--impl conformance.selfcheck.mutants:<name>`` names them too.
from conformance.selfcheck.mutants_statements import *  # noqa: E402,F401,F403
from conformance.selfcheck.mutants_atom import *  # noqa: E402,F401,F403
