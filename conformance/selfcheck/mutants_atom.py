"""Deliberately broken ATOM references: one per quoted statement of the ATOM design.

Each breaks exactly the value, name, order or rule one statement of ``conformance/spec/004_atom.toml``
quotes (the statement names it in its ``mutants`` field), and names the conformance tests that must
catch it. They register into :data:`conformance.selfcheck.mutant_registry.MUTANTS` like the others and are
used the same way (``--conformance-impl conformance.selfcheck.mutants:<name>``).
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
import functools
import sys

from conformance.selfcheck.mutant_registry import MUTANTS, _module, _mutant

_BEFORE = set(MUTANTS)

_T = "conformance/tests/test_atom_statements.py"
_CONFIG = "reference.atom.config"
_MODES = "reference.atom.graph_mode"
_DECORATORS = "reference.atom.decorators"
_RUNNER = "reference.atom.model_runner"
_FWD = "reference.atom.forward_context"
_REGION = "reference.atom.region_graph"
_CUSTOM_OPS = "reference.atom.custom_ops"
_BACKEND = "reference.atom.vllm_backend"


def _everywhere(old: object, new: object) -> None:
    """Put ``new`` wherever a ``reference.atom`` module holds ``old`` under a name."""
    _module("reference.atom")
    for name, module in list(sys.modules.items()):
        if name == "reference.atom" or name.startswith("reference.atom."):
            for attr, value in list(vars(module).items()):
                if value is old:
                    setattr(module, attr, new)


def _default(cls: type, name: str, make) -> None:
    """Instances of dataclass ``cls`` built without ``name`` get ``make()`` instead of its default."""
    init = cls.__init__

    @functools.wraps(init)
    def changed(self, *args, **kwargs):
        if name not in kwargs:
            kwargs[name] = make()
        init(self, *args, **kwargs)

    cls.__init__ = changed


def _compilation_config():
    return _module(_CONFIG).CompilationConfig


def _mode(name: str):
    return getattr(_module(_MODES).CUDAGraphMode, name)


# --- levels and graph modes: names, values, helpers ------------------------------------------------


@_mutant("ATOM levels: names", f"{_T}::test_each_level_number_carries_the_seeds_name", r"level number -> \(name, number\)")
def level_1_misnamed():
    """Level 1 is called ``DYNAMO_ONLY`` instead of the seed's ``DYNAMO_AS_IS``."""
    home = _module(_CONFIG)
    home.CompilationLevel = enum.IntEnum(
        "CompilationLevel", {"NO_COMPILATION": 0, "DYNAMO_ONLY": 1, "DYNAMO_ONCE": 2, "PIECEWISE": 3})


@_mutant("ATOM graph modes: values", f"{_T}::test_each_graph_mode_has_the_seeds_value", r"graph mode -> value")
def full_and_tr_hybrid_swapped_values():
    """``TR_HYBRID`` is 2 and ``FULL`` 1 (the pairs follow), against the seed's table."""
    old = _module(_MODES).CUDAGraphMode
    new = enum.Enum("CUDAGraphMode", {"NONE": 0, "TR_HYBRID": 2, "FULL": 1, "FULL_DECODE_ONLY": (1, 0), "FULL_AND_TR_HYBRID": (1, 2)})
    new.__module__ = old.__module__
    for helper in ("separate_routine", "decode_mode", "mixed_mode", "max_cudagraph_mode", "has_full_cudagraphs", "uses_tr_hybrid", "parse"):
        setattr(new, helper, old.__dict__[helper])
    _everywhere(old, new)


def _helper(name: str, body) -> None:
    setattr(_module(_MODES).CUDAGraphMode, name, body)


@_mutant("ATOM graph modes: decode_mode", f"{_T}::test_decode_mode_is_the_pairs_first_element", r"decode_mode\(\): mode -> returned")
def decode_mode_takes_the_second():
    """``decode_mode()`` of a pair mode returns its second element (the mixed batches' mode)."""
    _helper("decode_mode", lambda self: type(self)(self.value[1]) if isinstance(self.value, tuple) else self)


@_mutant("ATOM graph modes: mixed_mode", f"{_T}::test_mixed_mode_is_the_pairs_second_element", r"mixed_mode\(\): mode -> returned")
def mixed_mode_takes_the_first():
    """``mixed_mode()`` of a pair mode returns its first element (the decode batches' mode)."""
    _helper("mixed_mode", lambda self: type(self)(self.value[0]) if isinstance(self.value, tuple) else self)


@_mutant("ATOM graph modes: separate_routine", f"{_T}::test_separate_routine_is_true_for_the_pair_modes_only",
         r"separate_routine\(\): mode -> returned")
def separate_routine_for_one_pair_only():
    """``separate_routine()`` is true for ``FULL_DECODE_ONLY`` only, not for ``FULL_AND_TR_HYBRID``."""
    _helper("separate_routine", lambda self: self.name == "FULL_DECODE_ONLY")


@_mutant("ATOM graph modes: has_full_cudagraphs", f"{_T}::test_has_full_cudagraphs_when_either_part_is_full",
         r"has_full_cudagraphs\(\): mode -> returned")
def has_full_for_full_alone():
    """``has_full_cudagraphs()`` is true for ``FULL`` alone: the pair modes with a FULL part say false."""
    _helper("has_full_cudagraphs", lambda self: self.name == "FULL")


@_mutant("ATOM graph modes: uses_tr_hybrid", f"{_T}::test_uses_tr_hybrid_when_either_part_is_tr_hybrid",
         r"uses_tr_hybrid\(\): mode -> returned")
def uses_tr_hybrid_reads_decode_only():
    """``uses_tr_hybrid()`` looks at the decode part only, so ``FULL_AND_TR_HYBRID`` says false."""
    _helper("uses_tr_hybrid", lambda self: self.decode_mode().name == "TR_HYBRID")


@_mutant("ATOM graph modes: max_cudagraph_mode", f"{_T}::test_max_cudagraph_mode_is_the_highest_valued_part",
         r"max_cudagraph_mode\(\): mode -> returned")
def max_mode_takes_the_lowest():
    """``max_cudagraph_mode()`` returns the lowest-valued part of a pair, not the highest."""
    _helper("max_cudagraph_mode", lambda self: type(self)(min(self.decode_mode().value, self.mixed_mode().value)))


# --- configuration defaults --------------------------------------------------------------------

_DEFAULTS_TEST = f"{_T}::test_compilation_config_defaults_are_the_seeds"
_CONFIG_DEFAULTS_TEST = f"{_T}::test_config_defaults_are_the_seeds"


@_mutant("ATOM configuration: level default", _DEFAULTS_TEST, r"'level': 3")
def default_level_piecewise():
    """``CompilationConfig()`` defaults to level 3 instead of 0."""
    _default(_compilation_config(), "level", lambda: 3)


@_mutant("ATOM configuration: use_cudagraph default", _DEFAULTS_TEST, r"'use_cudagraph': False")
def default_use_cudagraph_off():
    """``use_cudagraph`` defaults to ``False``."""
    _default(_compilation_config(), "use_cudagraph", lambda: False)


@_mutant("ATOM configuration: cudagraph_capture_sizes default", _DEFAULTS_TEST, r"'cudagraph_capture_sizes': \[1, 2, 4, 8\]")
def default_capture_sizes_given():
    """``cudagraph_capture_sizes`` defaults to ``[1, 2, 4, 8]`` instead of ``None``."""
    _default(_compilation_config(), "cudagraph_capture_sizes", lambda: [1, 2, 4, 8])


@_mutant("ATOM configuration: cuda_graph_sizes default", _DEFAULTS_TEST, r"'cuda_graph_sizes': \[256\]")
def default_cuda_graph_sizes_256():
    """``cuda_graph_sizes`` defaults to ``[256]`` instead of ``[512]``."""
    _default(_compilation_config(), "cuda_graph_sizes", lambda: [256])


@_mutant("ATOM configuration: cudagraph_mode default", _DEFAULTS_TEST, r"'cudagraph_mode': <CUDAGraphMode\.FULL")
def default_mode_full():
    """``cudagraph_mode`` defaults to ``FULL`` instead of ``None``."""
    _default(_compilation_config(), "cudagraph_mode", lambda: _mode("FULL"))


@_mutant("ATOM configuration: splitting_ops default", _DEFAULTS_TEST, r"'splitting_ops': \[\]")
def default_splitting_ops_empty():
    """``splitting_ops`` defaults to ``[]`` instead of ``None``."""
    _default(_compilation_config(), "splitting_ops", list)


@_mutant("ATOM configuration: cudagraph_copy_inputs default", _DEFAULTS_TEST, r"'cudagraph_copy_inputs': True")
def default_copy_inputs_on():
    """``cudagraph_copy_inputs`` defaults to ``True``."""
    _default(_compilation_config(), "cudagraph_copy_inputs", lambda: True)


@_mutant("ATOM configuration: use_inductor default", _DEFAULTS_TEST, r"'use_inductor': False")
def default_use_inductor_off():
    """``use_inductor`` defaults to ``False``."""
    _default(_compilation_config(), "use_inductor", lambda: False)


@_mutant("ATOM configuration: compile_sizes default", _DEFAULTS_TEST, r"'compile_sizes': \['cudagraph_capture_sizes'\]")
def default_compile_sizes_every_capture_size():
    """``compile_sizes`` defaults to ``["cudagraph_capture_sizes"]`` instead of ``None``."""
    _default(_compilation_config(), "compile_sizes", lambda: ["cudagraph_capture_sizes"])


@_mutant("ATOM configuration: inductor_compile_config default", _DEFAULTS_TEST, r"'inductor_compile_config': \{'max_autotune': True\}")
def default_inductor_config_autotunes():
    """``inductor_compile_config`` defaults to ``{"max_autotune": True}`` instead of ``{}``."""
    _default(_compilation_config(), "inductor_compile_config", lambda: {"max_autotune": True})


@_mutant("ATOM configuration: debug_dump_path default", _DEFAULTS_TEST, r"'debug_dump_path': '/tmp/atom_debug'")
def default_debug_dump_on():
    """``debug_dump_path`` defaults to ``/tmp/atom_debug`` instead of ``""``."""
    _default(_compilation_config(), "debug_dump_path", lambda: "/tmp/atom_debug")


@_mutant("ATOM configuration: cache_dir default", _DEFAULTS_TEST, r"'cache_dir': '\.'")
def default_cache_dir_cwd():
    """``cache_dir`` defaults to ``"."`` instead of ``""``."""
    _default(_compilation_config(), "cache_dir", lambda: ".")


@_mutant("ATOM configuration: enforce_eager default", _CONFIG_DEFAULTS_TEST, r"'enforce_eager': True")
def default_enforce_eager_on():
    """``Config().enforce_eager`` defaults to ``True``."""
    _default(_module(_CONFIG).Config, "enforce_eager", lambda: True)


@_mutant("ATOM configuration: Config.capture_sizes default", _CONFIG_DEFAULTS_TEST, r"'capture_sizes': \[\]")
def default_config_capture_sizes_empty():
    """``Config().capture_sizes`` defaults to ``[]`` instead of ``None``."""
    _default(_module(_CONFIG).Config, "capture_sizes", list)


@_mutant("ATOM configuration: Config.compilation_config default", _CONFIG_DEFAULTS_TEST, r"'compilation_config is fresh': False")
def default_compilation_config_shared():
    """Every ``Config()`` shares one ``CompilationConfig`` instance instead of a fresh ``CompilationConfig()``."""
    shared = []

    def one():
        if not shared:
            shared.append(_compilation_config()())
        return shared[0]

    _default(_module(_CONFIG).Config, "compilation_config", one)


# --- what level 3 resolves ---------------------------------------------------------------------


@_mutant("ATOM level 3: Config.__post_init__", f"{_T}::test_level_3_resolves_splitting_ops_sizes_and_mode", r"splitting_ops None")
def level_3_leaves_splitting_ops_unset():
    """``Config.__post_init__`` at level 3 does not call ``set_splitting_ops_for_v1()``: no op splits the graph."""
    _compilation_config().set_splitting_ops_for_v1 = lambda self: None


@_mutant("ATOM level 3: resolved below level 3", f"{_T}::test_below_level_3_nothing_is_resolved_for_pieces", r"level 0")
def sizes_resolved_at_every_level():
    """The capture sizes and splitting ops are resolved at every level, not only when the level is PIECEWISE."""
    config = _module(_CONFIG).Config
    post_init = config.__post_init__

    @functools.wraps(post_init)
    def always(self):
        post_init(self)
        cc = self.compilation_config
        if cc.level != 3:
            cc.set_splitting_ops_for_v1()
            self._set_cudagraph_sizes()

    config.__post_init__ = always


@_mutant("ATOM level 3: default splitting ops", f"{_T}::test_level_3_resolves_splitting_ops_sizes_and_mode", r"splitting_ops \[")
def default_splitting_ops_misnamed():
    """Level 3 splits at ``unified_attention`` and ``mla_attention``, not the seed's ``unified_attention_with_output``."""
    _module(_CONFIG).DEFAULT_SPLITTING_OP_NAMES = ("unified_attention", "mla_attention")


@_mutant("ATOM level 3: TR_HYBRID when none was chosen", f"{_T}::test_level_3_keeps_a_chosen_mode_and_defaults_to_tr_hybrid",
         r"a chosen mode was replaced")
def level_3_overrides_the_chosen_mode():
    """Level 3 sets ``TR_HYBRID`` whatever mode was chosen, not only when none was."""
    config = _module(_CONFIG).Config
    post_init = config.__post_init__

    @functools.wraps(post_init)
    def override(self):
        post_init(self)
        if self.compilation_config.level == 3 and not self.enforce_eager:
            self.compilation_config.cudagraph_mode = _mode("TR_HYBRID")

    config.__post_init__ = override


@_mutant("ATOM capture sizes: explicit sizes", f"{_T}::test_explicit_capture_sizes_are_used_directly", r"must override")
def explicit_capture_sizes_ignored():
    """``cudagraph_capture_sizes`` is ignored: the sizes always come from ``cuda_graph_sizes``."""
    config = _module(_CONFIG).Config
    sizes = config._set_cudagraph_sizes

    @functools.wraps(sizes)
    def from_ladder(self):
        self.compilation_config.cudagraph_capture_sizes = None
        sizes(self)

    config._set_cudagraph_sizes = from_ladder


@_mutant("ATOM capture sizes: several values", f"{_T}::test_several_cuda_graph_sizes_are_used_as_given", r"capture_sizes ==")
def several_sizes_make_a_ladder():
    """Several ``cuda_graph_sizes`` values generate the ladder up to the largest instead of being used as given."""
    home = _module(_CONFIG)
    config = home.Config
    sizes = config._set_cudagraph_sizes

    @functools.wraps(sizes)
    def ladder(self):
        cc = self.compilation_config
        if cc.cudagraph_capture_sizes is None and len(cc.cuda_graph_sizes) > 1:
            cc.cudagraph_capture_sizes = home.default_capture_sizes(max(cc.cuda_graph_sizes))
        sizes(self)

    config._set_cudagraph_sizes = ladder


# --- the compile decorator and enforce_eager ---------------------------------------------------


@_mutant("ATOM decorator: levels 0 and 1 call self.forward()",
         f"{_T}::test_levels_0_and_1_set_do_not_compile_and_call_forward_directly", r"forward was called")
def uncompiled_call_skips_self_forward():
    """A model that is not compiled runs its class's ``forward``, not ``self.forward()``: a forward
    set on the instance (a wrapper, a patched layer) is ignored."""
    home = _module(_DECORATORS)
    decorate = home._support_torch_compile

    @functools.wraps(decorate)
    def class_forward(cls, dims):
        cls = decorate(cls, dims)
        call = cls.__call__

        def __call__(self, *args, **kwargs):
            if self.do_not_compile:
                return type(self).forward(self, *args, **kwargs)
            return call(self, *args, **kwargs)

        cls.__call__ = __call__
        return cls

    home._support_torch_compile = class_forward


@_mutant("ATOM enforce_eager: skips all compilation", f"{_T}::test_enforce_eager_skips_compilation_and_graphs",
         r"enforce_eager at level 3 still compiles the model")
def enforce_eager_still_compiles():
    """``enforce_eager=True`` turns graphs off but a decorated model at level 3 still compiles."""
    home = _module(_DECORATORS)
    decorate = home._support_torch_compile

    @functools.wraps(decorate)
    def compiles(cls, dims):
        cls = decorate(cls, dims)
        init = cls.__init__

        def __init__(self, *args, atom_config=None, **kwargs):
            if atom_config is not None and atom_config.enforce_eager:
                atom_config = dataclasses.replace(atom_config, enforce_eager=False)
            init(self, *args, atom_config=atom_config, **kwargs)

        cls.__init__ = __init__
        return cls

    home._support_torch_compile = compiles


@_mutant("ATOM enforce_eager: no graphs", f"{_T}::test_enforce_eager_skips_compilation_and_graphs", r"assert <CUDAGraphMode\.FULL")
def enforce_eager_keeps_the_graph_mode():
    """``Config(enforce_eager=True)`` keeps the chosen graph mode instead of forcing ``NONE``."""
    config = _module(_CONFIG).Config
    post_init = config.__post_init__

    @functools.wraps(post_init)
    def keeps(self):
        chosen = self.compilation_config.cudagraph_mode
        post_init(self)
        if self.enforce_eager and chosen is not None:
            self.compilation_config.cudagraph_mode = chosen

    config.__post_init__ = keeps


# --- custom ops --------------------------------------------------------------------------------

_OP_TEST = f"{_T}::test_a_registered_op_runs_mutates_traces_with_its_fake_and_splits"


@_mutant("ATOM custom ops: the registered name", _OP_TEST, r"not 'namespace\.op_name'")
def register_returns_the_bare_name():
    """``direct_register_custom_op`` returns the op's bare name, not ``"namespace.op_name"``."""
    home = _module(_CUSTOM_OPS)
    register = home.direct_register_custom_op

    @functools.wraps(register)
    def bare(*args, **kwargs):
        return register(*args, **kwargs).partition(".")[2]

    _everywhere(register, bare)


@_mutant("ATOM custom ops: CUDA by default", _OP_TEST, r"no CUDA kernel")
def default_dispatch_cpu_only():
    """An op registered with no ``dispatch_key`` gets a CPU kernel only, not the seed's default ``CUDA``."""
    _module(_CUSTOM_OPS).DEFAULT_DISPATCH_KEYS = ("CPU",)


@_mutant("ATOM custom ops: usable as splitting ops", _OP_TEST, r"is not a registered op")
def registered_ops_refused_as_splitting_ops():
    """A splitting op must be an ATen op: ops registered with ``direct_register_custom_op`` are refused."""
    _module(_CONFIG).is_registered_op = lambda name: name.startswith("aten.")


# --- the forward context -----------------------------------------------------------------------

_CONTEXT_TEST = f"{_T}::test_the_forward_context_carries_the_seeds_fields_and_is_empty_after_a_pass"


@_mutant("ATOM forward context: fields", _CONTEXT_TEST, r"fields missing: \['spec_decode_metadata'\]")
def forward_context_lacks_spec_decode_metadata():
    """The forward context has no ``spec_decode_metadata`` field."""
    home = _module(_FWD)
    base = home.ForwardContext

    class NoSpecDecode(base):
        def __getattribute__(self, name):
            if name == "spec_decode_metadata":
                raise AttributeError(name)
            return super().__getattribute__(name)

    home.ForwardContext = NoSpecDecode


@_mutant("ATOM forward context: reset", _CONTEXT_TEST, r"the reset context is not empty")
def reset_keeps_the_last_context():
    """``reset_forward_context()`` ends the pass but leaves its context readable instead of an empty one."""
    home = _module(_FWD)

    def keep():
        home._slot.set_at = None

    _everywhere(home.reset_forward_context, keep)


@_mutant("ATOM forward context: no_compile_layers", _CONTEXT_TEST, r"static_forward_context did not reach no_compile_layers")
def no_compile_layers_dropped():
    """The forward context's ``no_compile_layers`` is always empty: ``static_forward_context`` is not read."""
    home = _module(_FWD)
    set_context = home.set_forward_context

    @functools.wraps(set_context)
    def without(attn_metadata, atom_config=None, *args, **kwargs):
        return set_context(attn_metadata, None, *args, **kwargs)

    home.set_forward_context = without


@_mutant("ATOM forward context: Context defaults", f"{_T}::test_context_fields_default_as_the_seed_says", r"'is_draft': True")
def context_is_draft_by_default():
    """``Context.is_draft`` defaults to ``True``."""
    _default(_module(_FWD).Context, "is_draft", lambda: True)


@_mutant("ATOM request graphs: the bucket key", f"{_T}::test_request_bucket_is_running_bs_and_the_draft_tokens",
         r"\(running_bs, max_seqlen_q\) -> bucket")
def draft_num_counts_every_query_row():
    """``request_bucket`` keys on every query row, ``(running_bs, max_seqlen_q)``, not on the draft tokens."""
    home = _module(_REGION)
    old = home.request_bucket
    _everywhere(old, lambda running_bs, max_seqlen_q: (running_bs, max_seqlen_q))


# --- the capture loop --------------------------------------------------------------------------


def _runner():
    return _module(_RUNNER).ModelRunner


@_mutant("ATOM capture: largest first", f"{_T}::test_capture_records_the_largest_batch_first[TR_HYBRID]",
         r"batch sizes in the order the capture ran them")
def capture_smallest_first():
    """The capture loop records the capture sizes in ascending order, smallest first."""
    _module(_RUNNER).sorted = lambda iterable, *, key=None, reverse=False: builtins.sorted(iterable, key=key)


@_mutant("ATOM capture: sizes returned ascending", f"{_T}::test_capture_returns_the_elapsed_time_and_the_sizes_ascending",
         r"capture sizes returned")
def capture_returns_sizes_descending():
    """``capture_cudagraph()`` returns the sizes in the order it recorded them, largest first."""
    runner = _runner()
    capture = runner.capture_cudagraph

    @functools.wraps(capture)
    def descending(self):
        elapsed, sizes = capture(self)
        return elapsed, builtins.sorted(sizes, reverse=True)

    runner.capture_cudagraph = descending


@_mutant("ATOM capture: what capture returns", f"{_T}::test_capture_returns_the_elapsed_time_and_the_sizes_ascending",
         r"capture_cudagraph\(\) returned")
def capture_returns_the_sizes_alone():
    """``capture_cudagraph()`` returns the list of sizes, not ``(elapsed_time, capture_sizes)``."""
    runner = _runner()
    capture = runner.capture_cudagraph

    @functools.wraps(capture)
    def sizes_only(self):
        return capture(self)[1]

    runner.capture_cudagraph = sizes_only


@_mutant("ATOM capture: progress on rank 0", f"{_T}::test_capture_reports_progress_on_rank_0_only", r"rank 1 reported capture progress")
def progress_on_every_rank():
    """Every rank reports capture progress, not rank 0 alone."""
    runner = _runner()

    def report(self, text):
        print(text, file=self.progress if self.progress is not None else sys.stderr, flush=True)

    runner._report = report


@_mutant("ATOM capture: a warm-up before each recording",
         f"{_T}::test_every_bucket_runs_a_warmup_forward_before_its_recording[TR_HYBRID]", r"warm-up, then recording")
def token_graphs_recorded_cold():
    """Under TR_HYBRID the capture loop records each bucket without running the warm-up forward first."""
    runner = _runner()
    capture = runner.capture_cudagraph
    fwd = _module(_FWD)

    class SkipWarmup:
        def __init__(self, model):
            self.__dict__["_model"] = model

        def __getattr__(self, name):
            return getattr(self._model, name)

        def __call__(self, *args, **kwargs):
            if fwd.get_forward_context().tr_graph is None:
                return None
            return self._model(*args, **kwargs)

    @functools.wraps(capture)
    def cold(self):
        if not self.graph_mode.uses_tr_hybrid():
            return capture(self)
        model = self.model
        self.model = SkipWarmup(model)
        try:
            return capture(self)
        finally:
            self.model = model

    runner.capture_cudagraph = cold


@_mutant("ATOM capture: records with tr_graph='record'",
         f"{_T}::test_capture_records_with_tr_graph_record_and_a_replayed_step_sees_replay", r"tr_graph of the recording passes")
def recording_hides_record_mode():
    """A token graph records with the forward context's ``tr_graph`` cleared: the model sees no record pass."""
    graph = _module(_REGION).TokenGraph
    record = graph.record
    fwd = _module(_FWD)

    @functools.wraps(record)
    def hidden(self, fn, inputs, *, phase):
        ctx = fwd.get_forward_context()
        saved, ctx.tr_graph = ctx.tr_graph, None
        try:
            return record(self, fn, inputs, phase=phase)
        finally:
            ctx.tr_graph = saved

    graph.record = hidden


@_mutant("ATOM forward context: tr_graph='replay'",
         f"{_T}::test_capture_records_with_tr_graph_record_and_a_replayed_step_sees_replay",
         r"tr_graph seen by the eager region of a replayed decode")
def replay_hides_replay_mode():
    """A replayed token bucket runs its eager regions under a context whose ``tr_graph`` is not ``"replay"``."""
    graph = _module(_REGION).TokenGraph
    replay = graph.replay
    fwd = _module(_FWD)

    @functools.wraps(replay)
    def hidden(self, inputs, *, phase):
        ctx = fwd.get_forward_context()
        saved, ctx.tr_graph = ctx.tr_graph, None
        try:
            return replay(self, inputs, phase=phase)
        finally:
            ctx.tr_graph = saved

    graph.replay = hidden


@_mutant("ATOM capture: max_q_len", f"{_T}::test_capture_lays_out_draft_tokens_plus_one_query_rows", r"captured with mtp_k=2")
def max_q_len_ignores_the_drafter():
    """The capture loop lays out one query row per request whatever ``mtp_k``: draft tokens are not counted."""
    _runner().max_q_len = property(lambda self: 1)


@_mutant("ATOM capture: symmetric across DP ranks", f"{_T}::test_every_dp_rank_is_told_the_same_count_at_capture",
         r"num_tokens_across_dp at capture")
def capture_counts_only_rank_0():
    """At capture each rank is told that only rank 0 has tokens (other ranks count 0), not the same bucket on every rank."""
    home = _module(_RUNNER)
    block = home.in_forward_context

    def lopsided(*args, num_tokens_across_dp=None, **kwargs):
        if num_tokens_across_dp and len(set(num_tokens_across_dp)) == 1 and len(num_tokens_across_dp) > 1:
            num_tokens_across_dp = [num_tokens_across_dp[0]] + [0] * (len(num_tokens_across_dp) - 1)
        return block(*args, num_tokens_across_dp=num_tokens_across_dp, **kwargs)

    home.in_forward_context = lopsided


@_mutant("ATOM graph modes: FULL_AND_TR_HYBRID records as TR_HYBRID",
         f"{_T}::test_full_and_tr_hybrid_records_token_graphs_as_tr_hybrid_does", r"did not record token graphs")
def full_and_tr_hybrid_records_full_graphs():
    """The runner records ``FULL_AND_TR_HYBRID`` as FULL (request graphs for decode), not as TR_HYBRID."""
    _runner()._tr_hybrid_active = lambda self: self.graph_mode.name == "TR_HYBRID"


# --- level 3: what a compile writes (the slow tests of test_atom_statements.py) -----------------


@_mutant("ATOM piecewise: the general shape first", f"{_T}::test_the_first_call_runs_the_general_shape_even_at_a_compile_size",
         r"compiled for its size")
def first_call_specializes():
    """A piece's first call at a size in ``compile_sizes`` compiles for that size instead of running the general shape."""
    backend = _module("reference.atom.piecewise_backend").PiecewiseBackend
    run = backend._run

    @functools.wraps(run)
    def eager_to_specialize(self, *args):
        self.first_run_finished = True
        return run(self, *args)

    backend._run = eager_to_specialize


_HOME_TEST = f"{_T}::test_an_empty_cache_dir_means_the_home_cache_folder_per_rank"


@_mutant("ATOM compile cache: the default folder", _HOME_TEST, r"not under ~/\.cache/atom/torch_compile_cache")
def default_cache_root_without_atom():
    """An empty ``cache_dir`` caches under ``~/.cache/torch_compile_cache``, not ``~/.cache/atom/torch_compile_cache``."""
    import os

    home = _module(_BACKEND)
    home.default_cache_root = lambda: os.path.join(os.path.expanduser("~"), ".cache", "torch_compile_cache")


@_mutant("ATOM compile cache: rank folders", _HOME_TEST, r"not under ~/\.cache/atom/torch_compile_cache")
def cache_folder_of_another_rank():
    """Rank 0 compiles into the ``rank_1`` folder: the folder does not name the rank that compiled."""
    _module(_BACKEND).get_rank = lambda: 1


@_mutant("ATOM compile cache: computation_graph.py", _HOME_TEST, r"\{'vllm_compile_cache\.py'\} ==")
def computation_graph_not_saved():
    """The stitching graph is not saved to ``computation_graph.py``."""
    home = _module(_BACKEND)
    write = home.write_text_atomically

    def skip(path, text):
        if not path.endswith("computation_graph.py"):
            write(path, text)

    home.write_text_atomically = skip


@_mutant("ATOM compile cache: the cache directory hash", f"{_T}::test_another_configuration_compiles_into_another_hash_folder",
         r"two configurations, cache folders")
def cache_hash_ignores_the_configuration():
    """The cache directory hash leaves the configuration out: two configurations share one folder."""
    backend = _module(_BACKEND).VllmBackend
    hash_key = backend.compute_hash_key

    @functools.wraps(hash_key)
    def without_config(self, graph):
        config = self.config
        self.config = type("Unconfigured", (), {"compute_hash": staticmethod(lambda: "")})()
        try:
            return hash_key(self, graph)
        finally:
            self.config = config

    backend.compute_hash_key = without_config


@_mutant("ATOM compile cache: cudagraph_copy_inputs", f"{_T}::test_copy_inputs_hands_the_graph_one_static_buffer",
         r"were not copied into one static buffer")
def copy_inputs_ignored():
    """``cudagraph_copy_inputs=True`` wraps the callable but hands the caller's tensors through uncopied."""
    _module(_BACKEND)._CopyIntoStaticBuffers._copy_in = lambda self, *args: list(args)


@_mutant("ATOM debug dump: rank_0", f"{_T}::test_debug_dump_path_receives_the_graphs_under_rank_0",
         r"not under <debug_dump_path>/rank_0/")
def debug_dump_without_rank():
    """The debug dump goes straight into ``debug_dump_path``, not into its ``rank_0`` folder."""
    home = _module("reference.atom.monitor")
    home.debug_dump_dir = lambda config: getattr(getattr(config, "compilation_config", config), "debug_dump_path", "") or ""


@_mutant("ATOM configuration: the compile_sizes alias",
         f"{_T}::test_the_first_call_runs_the_general_shape_even_at_a_compile_size", r"did not specialize every piece")
def compile_sizes_alias_ignored():
    """``compile_sizes=["cudagraph_capture_sizes"]`` resolves to no size instead of every capture size."""
    cc = _compilation_config()
    init_sizes = cc.init_with_cudagraph_sizes

    @functools.wraps(init_sizes)
    def without_alias(self, cudagraph_capture_sizes):
        init_sizes(self, [])

    cc.init_with_cudagraph_sizes = without_alias


@_mutant("ATOM forward context: running_tokens", f"{_T}::test_running_tokens_counts_rows_and_running_bs_requests",
         r"\(running_bs, running_tokens\) captured with mtp_k=2")
def running_tokens_counts_requests():
    """``Context.running_tokens`` holds the padded request count (``running_bs``), not the padded row count."""
    runner = _runner()
    metadata = runner._decode_metadata

    @functools.wraps(metadata)
    def requests(self, bs, *args, **kwargs):
        attn, context = metadata(self, bs, *args, **kwargs)
        return attn, dataclasses.replace(context, running_tokens=context.running_bs)

    runner._decode_metadata = requests


@_mutant("ATOM compile cache: copy inputs only with a graph mode",
         f"{_T}::test_copy_inputs_under_mode_none_reads_the_callers_tensor", r"copied the input under cudagraph_mode NONE")
def copy_inputs_under_mode_none():
    """``cudagraph_copy_inputs=True`` copies inputs into static buffers under ``cudagraph_mode`` NONE too."""
    backend = _module(_BACKEND).VllmBackend
    call = backend.__call__

    @functools.wraps(call)
    def always(self, graph, example_inputs):
        cc = self.config.compilation_config
        mode = cc.cudagraph_mode
        if cc.cudagraph_copy_inputs:
            cc.cudagraph_mode = _mode("FULL")
        try:
            return call(self, graph, example_inputs)
        finally:
            cc.cudagraph_mode = mode

    backend.__call__ = always


_MATRIX = "conformance/tests/test_atom_matrix.py"


@_mutant("ATOM graph modes: NONE captures nothing", f"{_MATRIX}::test_the_ladder_is_captured_and_decodes_within_it_replay[L0-NONE]",
         r"assert \[1, 2, 4\] == \[\]")
def mode_none_records_request_graphs():
    """The runner records and replays request graphs under ``cudagraph_mode`` NONE, as under FULL."""
    runner = _runner()
    graph_mode = runner.graph_mode

    def full_for_none(self):
        mode = graph_mode.fget(self)
        none = _mode("NONE")
        if mode is none and not self.enforce_eager and self.config.compilation_config.use_cudagraph:
            return _mode("FULL")
        return mode

    runner.graph_mode = property(full_for_none)


@_mutant("ATOM graph modes: FULL_DECODE_ONLY", f"{_MATRIX}::test_each_step_reports_the_path_the_dispatch_rules_give_it[L0-FULL_DECODE_ONLY-plain]",
         r"reported, expected")
def full_decode_only_runs_decodes_eagerly():
    """``FULL_DECODE_ONLY`` follows its mixed part (``NONE``) for every batch: decodes run eagerly instead
    of replaying full graphs."""
    runner = _runner()
    graph_mode = runner.graph_mode

    def mixed_part(self):
        mode = graph_mode.fget(self)
        return _mode("NONE") if mode.name == "FULL_DECODE_ONLY" else mode

    runner.graph_mode = property(mixed_part)


__all__ = sorted(set(MUTANTS) - _BEFORE)
