"""Per-statement mutants of seeds 000 to 003: each breaks exactly one statement of the catalogue
(``conformance/spec/00[0-3]_*.toml``), which names it in its ``mutants = [...]``; its tests are
tests that cite that statement.

Registered with :func:`conformance.selfcheck.mutants._mutant`; ``conformance.selfcheck.mutants``
imports this module at its end, so ``--impl conformance.selfcheck.mutants:<name>`` names them.
Like every mutant, a patch here runs only when its factory is called, never at import."""

from __future__ import annotations

import functools

from conformance.selfcheck.mutant_registry import MUTANTS, _module, _mutant

_SCOPE_MOD = "reference.compiler.scope"
_REQUEST = "reference.compiler.request"
_DRIVER = "reference.compiler.driver"
_RUNNER = "reference.runner.model_loading"
_WORKER = "reference.runner.worker"
_OPT_LEVEL = "reference.runner.opt_level"
_TRACING = "reference.flows.tracing"
_STAGED_BUILD = "reference.flows.staged_build"
_NATIVE = "reference.backends.native"
_ENV = "reference.core.env"

_SCOPE = "conformance/tests/test_compiler_args_scope.py"
_FLOWS = "conformance/tests/test_compiler_args_flows.py"


# --- seed 000: per-graph compiler arguments -------------------------------------------------------


@_mutant("000.precedence.compiler-default-o1", f"{_FLOWS}::test_a_list_without_a_level_compiles_as_O1",
         r"did not compile as -O1")
def compiler_default_is_o2():
    """A list without an optimization level compiles at ``-O2`` instead of the compiler's default
    ``-O1``."""
    _module(_DRIVER).DEFAULT_OPTLEVEL = 2


@_mutant("000.policy.example-inputs-none", f"{_FLOWS}::test_the_runner_hands_the_policy_no_example_inputs",
         r"passed example inputs")
def policy_gets_example_inputs():
    """The runner hands the model's policy the graph type's example inputs instead of ``None``."""
    runner = _module(_RUNNER).NeuronModelRunner
    home = _module(_RUNNER)

    def with_inputs(self, graph_type):
        home.check_graph_type(graph_type)
        if not self._per_graph_compiler_args or graph_type is None:
            return None
        base = list((self.compile_options or {}).get("compiler_args") or [])
        example = self.model.example_kwargs(graph_type) if hasattr(self.model, "example_kwargs") else {}
        return home.check_policy_result(self._compiler_args_policy(graph_type, example, base), graph_type,
                                        self._compiler_args_policy)

    assert hasattr(runner, "resolve_graph_compiler_args"), "the runner's resolver moved"
    runner.resolve_graph_compiler_args = with_inputs


@_mutant("000.runner.stamp-base-on-model",
         f"{_FLOWS}::test_the_models_own_encoder_site_compiles_with_the_list_from_the_stamped_base",
         r"the model's scope over the stamped base")
def base_not_stamped_on_the_model():
    """The runner enables the policy but never stamps the base arguments on the model, so the
    model's own sites (the encoder) open no scope."""
    runner = _module(_RUNNER).NeuronModelRunner
    load = runner.load_model

    @functools.wraps(load)
    def unstamped(self):
        setter = getattr(type(self.model), "set_base_compiler_args", None)
        out = load(self)
        if callable(setter):
            setter(self.model, None)
        self.model._neuron_base_compiler_args = None
        return out

    runner.load_model = unstamped


@_mutant("000.seams.before-platform-args", f"{_FLOWS}::test_platform_flags_are_added_after_the_scoped_list",
         r"NEURON_CC_FLAGS's --lnc 2 is not after")
def scope_replaces_the_platform_flags():
    """The platform arguments are applied before the scope, so a scoped list replaces them:
    ``NEURON_CC_FLAGS`` is lost for every graph compiled under a scope."""
    request, scope, env = _module(_REQUEST), _module(_SCOPE_MOD), _module(_ENV)
    real = request.platform_compiler_config

    def platform_first(options):
        if scope.current_scoped_compiler_args() is None:
            return real(options)
        get = env.get
        env.get = lambda name, *a, **k: "" if name == env.CC_FLAGS else get(name, *a, **k)
        try:
            return real(options)
        finally:
            env.get = get

    request.platform_compiler_config = platform_first


@_mutant("000.flow.native-two-element-jobs", f"{_FLOWS}::test_native_trace_jobs_have_two_elements_and_the_others_three",
         r"the native job is 3 elements")
def native_jobs_carry_a_list():
    """The native path's trace jobs carry the resolved list as a third element, as the capture
    path's do, instead of keeping two-element jobs."""
    worker = _module(_WORKER).NeuronWorker
    build = worker._build_trace_job

    @functools.wraps(build)
    def three(self, graph_type, kwargs=None):
        job = build(self, graph_type, kwargs)
        if len(job) == 2:
            return (*job, self.model_runner.resolve_graph_compiler_args(graph_type))
        return job

    worker._build_trace_job = three


@_mutant("000.scope.apply-replaces", f"{_SCOPE}::test_scope_replaces_compiler_args_and_keeps_other_options",
         r'got\["compiler_args"\] == \["-O3", "--target", "trn2"\]')
def scope_appends_to_the_options():
    """``apply_scoped_compiler_args`` appends the scoped list to the options' ``compiler_args``
    instead of replacing them."""
    scope = _module(_SCOPE_MOD)

    def appended(options):
        options = dict(options or {})
        scoped = scope._scoped.get()
        if scoped is not None:
            options["compiler_args"] = list(options.get("compiler_args") or []) + list(scoped)
        return options

    scope.apply_scoped_compiler_args = appended


@_mutant("000.scope.apply-without-scope", f"{_SCOPE}::test_no_scope_leaves_options_unchanged",
         r"apply_scoped_compiler_args\(OPTS\) == OPTS")
def no_scope_clears_the_list():
    """Without a scope, ``apply_scoped_compiler_args`` sets ``compiler_args`` to an empty list
    instead of leaving the options' own (the base arguments) in place."""
    scope = _module(_SCOPE_MOD)
    real = scope.apply_scoped_compiler_args

    def cleared(options):
        out = real(options)
        if scope._scoped.get() is None:
            out["compiler_args"] = []
        return out

    scope.apply_scoped_compiler_args = cleared


@_mutant("000.scope.none-is-no-override", f"{_SCOPE}::test_none_scope_is_no_override",
         r'_scoped\(impl\) == \["--target", "trn2"\]')
def none_scope_is_an_empty_list():
    """``scoped_compiler_args(None)`` overrides with an empty list instead of meaning "no
    per-graph override"."""
    scope = _module(_SCOPE_MOD)
    real = scope.scoped_compiler_args

    def empty(compiler_args):
        return real([] if compiler_args is None else compiler_args)

    scope.scoped_compiler_args = empty


@_mutant("000.scope.context-manager", f"{_SCOPE}::test_threads_do_not_see_each_others_scopes",
         r'seen == \{"a"|_scoped\(impl\) == \["-O1"\]')
def scope_is_a_process_global():
    """The scope is a process-wide global instead of a context variable: a thread sees the list
    another thread scoped."""
    scope = _module(_SCOPE_MOD)

    class _Global:
        value = None

        def get(self):
            return self.value

        def set(self, value):
            old, self.value = self.value, value
            return old

        def reset(self, token):
            self.value = token

    scope._scoped = _Global()


@_mutant("000.scope.concrete-list-only", f"{_SCOPE}::test_policy_returning_a_string_names_the_graph_type",
         r"DID NOT RAISE")
def policy_string_is_split():
    """A policy that returns one string instead of a list is split into arguments and accepted,
    where only a concrete list may reach the backend."""
    import shlex

    home = _module(_RUNNER)
    check = home.check_policy_result

    @functools.wraps(check)
    def lenient(result, graph_type, policy):
        if isinstance(result, str):
            result = shlex.split(result)
        return check(result, graph_type, policy)

    home.check_policy_result = lenient


@_mutant("000.precedence.explicit-level-wins", f"{_FLOWS}::test_explicit_caller_level_disables_the_policy_for_every_graph",
         r"the policy ran although the caller set a level")
def explicit_level_keeps_the_policy():
    """An explicit caller level is applied to the base arguments but leaves the model's policy on,
    so per-graph lists still override the caller's level."""
    runner = _module(_RUNNER).NeuronModelRunner
    load = runner.load_model

    @functools.wraps(load)
    def policy_stays(self):
        out = load(self)
        policy = getattr(self.model, "compiler_args_for", None)
        if policy is not None:
            self._per_graph_compiler_args, self._compiler_args_policy = True, policy
        return out

    runner.load_model = policy_stays


@_mutant("000.policy.graph-type-labels", f"{_SCOPE}::test_a_graph_type_that_is_not_one_is_refused_naming_it[not-a-string]",
         r"DID NOT RAISE")
def any_graph_type_accepted():
    """A graph type that is not a non-empty string (``7``) is handed to the policy instead of being
    refused naming it."""
    _module(_RUNNER).check_graph_type = lambda graph_type: None


@_mutant("000.helper.with-optimization-level",
         f"{_SCOPE}::test_level_helper_keeps_unrelated_items_verbatim", r'"--auto-cast", "all"\]|== \["-O2"\]')
def level_helper_reorders_flags():
    """``with_optimization_level`` puts the level first and sorts the other flags, instead of
    replacing the level where it stands and keeping every other item verbatim."""
    home = _module(_OPT_LEVEL)
    real = home.with_optimization_level

    @functools.wraps(real)
    def sorted_flags(args, level):
        out = real(args, level)
        return [f"-O{level}", *sorted(a for a in out if a != f"-O{level}")]

    home.with_optimization_level = sorted_flags
    for name in ("reference.runner", "reference.runner.model_loading", "reference"):
        module = _module(name)
        if getattr(module, "with_optimization_level", None) is real:
            module.with_optimization_level = sorted_flags


@_mutant("000.flow.old-cache-base-args", f"{_FLOWS}::test_old_cache_directory_compiles_with_the_base_arguments",
         r'args_source"\] == "base"|_starts_with\(r\["compiler_args"\]')
def old_cache_ignores_the_base_arguments():
    """A staged graph with no recorded arguments (an old cache directory) is built with an empty
    list instead of the base arguments ``parallel_compile`` was given."""
    build = _module(_STAGED_BUILD)
    real = build.staged_config

    @functools.wraps(real)
    def no_base(entry, base_compiler_args):
        return real(entry, None)

    build.staged_config = no_base


@_mutant("000.flow.parallel-compile-reads-cache-dir",
         f"{_FLOWS}::test_parallel_compile_of_a_directory_that_does_not_exist_is_an_error_naming_it", r"DID NOT RAISE")
def missing_staging_directory_is_empty():
    """``parallel_compile`` of a directory that does not exist builds nothing and reports success,
    instead of refusing the path: a typo surfaces later as cache misses."""
    import os

    build = _module(_STAGED_BUILD)
    real = build.parallel_compile

    @functools.wraps(real)
    def quiet(cache_dir, **kwargs):
        if not os.path.isdir(cache_dir):
            os.makedirs(cache_dir)
        return real(cache_dir, **kwargs)

    build.parallel_compile = quiet
    _module("reference.flows").parallel_compile = quiet


@_mutant("000.stability.native-assert-cache-key-args",
         f"{_FLOWS}::test_nondeterministic_policy_is_detected_by_the_native_seam", r"DID NOT RAISE")
def native_seam_trusts_the_key():
    """The native seam never checks that one cache key was built with one argument list
    (``_assert_cache_key_args`` does nothing), so a policy that changes its answer is served the
    artifact of the first list."""
    native = _module(_NATIVE)
    native._REGISTRY.check_and_record = lambda *a, **k: None
    native._assert_cache_key_args = lambda *a, **k: None



# --- seed 001: the torch.compile backend ----------------------------------------------------------

_GRAPH_BREAKS = "reference.backends.graph_breaks"
_METRICS = "reference.core.metrics"
_NEURON = "reference.backends.neuron"
_ENTRY = "reference.backends.compile_entry"  # the compile entry every seam shares
_CONTRACT = "conformance/tests/test_backend_contract.py"
_SUPPORT = "conformance/tests/test_backend_support.py"
_FX = "conformance/tests/test_fx_passes.py"
_KEYS = "conformance/tests/test_cache_key.py"
_GUARD_TESTS = "conformance/tests/test_spmd_guards.py"


def _env_default(name: str, value) -> None:
    """Make the reference's declared default of variable ``name`` ``value``."""
    import dataclasses

    env = _module(_ENV)
    env._VARS[name] = dataclasses.replace(env._VARS[name], default=value)


def _records_with(**changes) -> None:
    """Every metrics record the helper API returns has ``changes`` applied (a record of the wrong
    shape, the graphs compiled as before)."""
    import dataclasses

    registry = type(_module(_METRICS).METRICS)
    records = registry.records

    @functools.wraps(records)
    def changed(self):
        out = []
        for m in records(self):
            fields = {k: (v(m) if callable(v) else v) for k, v in changes.items()}
            private = {k: fields.pop(k) for k in list(fields) if k == "torch_neuronx_compile_us"}
            m = dataclasses.replace(m, **fields)
            if private:
                m = dataclasses.replace(m, _compile_us=private["torch_neuronx_compile_us"], _compile_us_source=None)
            out.append(m)
        return out

    registry.records = changed


_METRICS_TEST = f"{_CONTRACT}::test_metrics_describe_every_compiled_graph"


@_mutant("001.metrics.graph-id", _METRICS_TEST, r"graph_id")
def metrics_graph_id_is_the_name():
    """A metrics record's ``graph_id`` is the graph's name, not its cache key."""
    _records_with(graph_id=lambda m: m.graph_name)


@_mutant("001.metrics.graph-name", _METRICS_TEST, r"graph_name")
def metrics_graph_name_drops_the_graph_type():
    """A metrics record's ``graph_name`` leaves out the graph type
    (``{model_name}_{aot_id}_{nth}``)."""
    _records_with(graph_name=lambda m: m.graph_name.replace("_inference_", "_"))


@_mutant("001.metrics.has-collectives", _METRICS_TEST, r"has_collectives")
def metrics_has_collectives_unset():
    """A metrics record's ``has_collectives`` is ``None`` instead of a bool."""
    _records_with(has_collectives=None)


@_mutant("001.metrics.graph-node-count", _METRICS_TEST, r"graph_node_count")
def metrics_node_count_zero():
    """A metrics record's ``graph_node_count`` is always 0."""
    _records_with(graph_node_count=0)


@_mutant("001.metrics.timestamp", _METRICS_TEST, r"timestamp")
def metrics_timestamp_is_a_number():
    """A metrics record's ``timestamp`` is a float of seconds instead of a string."""
    import time

    _records_with(timestamp=lambda m: time.time())


@_mutant("001.metrics.fx-passes-us", _METRICS_TEST, r"torch_neuronx_fx_passes_us")
def metrics_fx_passes_in_seconds():
    """A metrics record's ``torch_neuronx_fx_passes_us`` is a float of seconds, not an int of
    microseconds."""
    _records_with(torch_neuronx_fx_passes_us=lambda m: m.torch_neuronx_fx_passes_us / 1e6)


@_mutant("001.metrics.lower-us", _METRICS_TEST, r"torch_neuronx_lower_us")
def metrics_lower_in_seconds():
    """A metrics record's ``torch_neuronx_lower_us`` is a float of seconds, not an int of
    microseconds."""
    _records_with(torch_neuronx_lower_us=lambda m: m.torch_neuronx_lower_us / 1e6)


@_mutant("001.metrics.compile-us", _METRICS_TEST, r"torch_neuronx_compile_us")
def metrics_compile_in_seconds():
    """A metrics record's ``torch_neuronx_compile_us`` is a float of seconds, not an int of
    microseconds."""
    cls = _module(_METRICS).NeuronCompilationMetrics
    real = cls.torch_neuronx_compile_us.fget
    cls.torch_neuronx_compile_us = property(lambda self: real(self) / 1e6)


@_mutant("001.breaks.diagnostic-type", f"{_CONTRACT}::test_an_op_with_no_lowering_breaks_the_graph[function]",
         r"gb_type|Op not supported by the Neuron backend")
def diagnostic_type_respelled():
    """A forced graph break raises ``Unsupported`` of the diagnostic type "Unsupported op (neuron)"
    instead of the seed's "Op not supported by the Neuron backend"."""
    _module(_GRAPH_BREAKS).GB_TYPE = "Unsupported op (neuron)"


@_mutant("001.breaks.list-from-installed",
         f"{_CONTRACT}::test_the_reported_no_lowering_list_is_the_one_compiles_break_on", r"every toolchain lowers")
def no_lowering_list_is_stale():
    """The no-lowering list is a fixed table rather than what the installed tools lower: it names
    ops (``exp``, ``tanh``) that lower, so they break graphs for nothing."""
    home = _module(_GRAPH_BREAKS)
    real = home.break_ops

    @functools.wraps(real)
    def stale():
        return {**dict(real()), "exp": "stale table entry", "tanh": "stale table entry"}

    home.break_ops = stale


@_mutant("001.breaks.method-form",
         f"{_CONTRACT}::test_sort_at_the_threshold_does_not_break_and_one_more_does[sort-method]",
         r"threshold \+ 1\) was compiled")
def method_form_never_breaks():
    """The graph-break rules see torch functions only: ``x.sort()`` above the threshold stays in
    the graph."""
    _module(_GRAPH_BREAKS)._on_method = lambda tx, name, args, kwargs: None


@_mutant("001.param.mode-warns", f"{_CONTRACT}::test_a_mode_other_than_default_warns_and_falls_back",
         r'"max-autotune" in m for m in given')
def other_modes_silent():
    """A ``mode`` other than the default is ignored without the warning that says so."""
    home = _module(_NEURON)
    warn = home.warn_user

    def quiet(message, *args, **kwargs):
        if "mode=" in str(message):
            return None
        return warn(message, *args, **kwargs)

    home.warn_user = quiet


@_mutant("001.param.dynamic-true-rejected",
         f"{_CONTRACT}::test_dynamic_true_is_rejected_at_compile_time_and_shapes_recompile_per_shape", r"DID NOT RAISE")
def dynamic_true_accepted():
    """``dynamic=True`` is accepted (and compiled per shape) instead of rejected at compile time."""
    _module(_ENTRY).reject_explicit_dynamic = lambda: None


@_mutant("001.param.options", f"{_CONTRACT}::test_options_must_be_a_dict_or_none", r"DID NOT RAISE")
def options_of_any_type():
    """``options`` that are not a dict (a list of flags) are accepted and ignored."""
    home = _module(_ENTRY)
    real = home.normalize_options

    @functools.wraps(real)
    def lenient(options):
        return real(options if isinstance(options, dict) else None)

    home.normalize_options = lenient


@_mutant("001.env.disable-fallback-execution", f"{_CONTRACT}::test_fallback_is_off_by_default_and_zero_turns_it_on",
         r'"TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"\) is True|DID NOT RAISE')
def fallback_on_by_default():
    """``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION`` defaults to false: a failing compile runs
    eagerly unless the user asks for the error."""
    env = _module(_ENV)
    _env_default(env.DISABLE_FALLBACK_EXECUTION, False)


@_mutant("001.env.fallback-off-execution-failure",
         f"{_CONTRACT}::test_an_execution_failure_reaches_the_caller_as_neff_execution_error_by_default",
         r"DID NOT RAISE")
def execution_failure_always_falls_back():
    """An execution failure runs the graph eagerly even with fallback disabled (the default): only
    compile failures reach the caller."""
    for name in (_ENTRY, "reference.backends.aot_autograd"):  # each imported it by name
        home = _module(name)
        real = home.with_fallback

        @functools.wraps(real)
        def always(*args, fallback, _real=real, **kwargs):
            return _real(*args, fallback=True, **kwargs)

        home.with_fallback = always


@_mutant("001.helper.neff-execution-error",
         f"{_CONTRACT}::test_an_execution_failure_reaches_the_caller_as_neff_execution_error_by_default",
         r"RuntimeError|DID NOT RAISE")
def execution_failure_is_a_plain_runtime_error():
    """An execution failure reaches the caller as a plain ``RuntimeError`` instead of
    ``NEFFExecutionError``."""
    runtime = _module("reference.runtime")

    class PlainRuntimeError(RuntimeError):
        def __init__(self, message="", *args, graph_name=None, **kwargs):
            super().__init__(message)

    runtime.NEFFExecutionError = PlainRuntimeError
    serving = _module("reference.pipeline.serving")
    serving.NEFFExecutionError = PlainRuntimeError



@_mutant("001.helper.get-model-name-default", f"{_SUPPORT}::test_get_model_name", r"declared Supported, observed")
def default_model_name_is_model():
    """``get_model_name()`` returns ``"model"`` when no name was set, not ``"model_default"``."""
    settings = _module("reference.core.settings")
    settings._MODEL_NAME.set("model")
    settings.DEFAULT_MODEL_NAME = "model"


@_mutant("001.helper.get-rank-outside", f"{_SUPPORT}::test_get_rank", r"declared Supported, observed")
def rank_outside_distributed_is_minus_one():
    """``get_rank()`` outside ``torch.distributed`` returns -1 instead of the device index (0)."""
    settings = _module("reference.core.settings")
    real = settings.get_rank

    @functools.wraps(real)
    def minus_one():
        import torch.distributed as dist

        return real() if dist.is_available() and dist.is_initialized() else -1

    settings.get_rank = minus_one
    for name in ("reference", "reference.backends.api"):
        if getattr(_module(name), "get_rank", None) is real:
            setattr(_module(name), "get_rank", minus_one)


@_mutant("001.helper.reset-dynamo-metrics", f"{_SUPPORT}::test_reset_dynamo_metrics", r"declared Supported, observed")
def reset_keeps_the_records():
    """``reset_dynamo_metrics()`` resets the counters but keeps the recorded graphs."""
    registry = type(_module(_METRICS).METRICS)

    def counters_only(self):
        with self._lock:
            self._counters.clear()
            self._graph_counts.clear()

    registry.reset = counters_only


@_mutant("001.helper.neff-compilation-error", f"{_SUPPORT}::test_neff_compilation_error",
         r"declared Supported, observed|NEFFCompilationError|CompilerArgumentError")
def compilation_error_exported_is_another_class():
    """The ``NEFFCompilationError`` the helper API exports is a class of its own that the backend
    never raises: a compiler failure cannot be caught by it."""
    reference = _module("reference")

    class NEFFCompilationError(RuntimeError):
        """Exported, never raised."""

    reference.NEFFCompilationError = NEFFCompilationError


@_mutant("001.metrics.enabled-tables", f"{_SUPPORT}::test_var_metric_tables", r"declared Supported, observed")
def graph_stats_file_misnamed():
    """The ``graph_stats`` table is written to ``graph-stats.csv`` instead of ``graph_stats.csv``."""
    import os

    api, env = _module("reference.backends.api"), _module(_ENV)
    api.graph_stats_path = lambda: os.path.join(env.get(env.METRICS_DIR), "graph-stats.csv")


@_mutant("001.env.target-override", f"{_CONTRACT}::test_a_target_in_the_options_compiles_as_the_override_variable_does",
         r"options target trn3 keyed")
def target_override_ignored():
    """``NEURON_PLATFORM_TARGET_OVERRIDE`` is read but never applied: graphs compile for the target
    of the options or the default."""
    env = _module(_ENV)
    get = env.get

    @functools.wraps(get)
    def without(name, *args, **kwargs):
        return None if name == env.PLATFORM_TARGET_OVERRIDE else get(name, *args, **kwargs)

    env.get = without


@_mutant("001.env.compile-options-target", f"{_CONTRACT}::test_a_target_in_the_options_compiles_as_the_override_variable_does",
         r"options target trn3 keyed|did not reach the compile")
def options_target_ignored():
    """``options={"target": ...}`` is accepted and ignored: graphs compile for the default target."""
    scope = _module(_SCOPE_MOD)
    real = scope.platform_compiler_config

    @functools.wraps(real)
    def no_target(options):
        return real({k: v for k, v in dict(options or {}).items() if k != "target"})

    scope.platform_compiler_config = no_target
    _module(_REQUEST).platform_compiler_config = no_target


@_mutant("001.env.debug-dir-default",
         f"{_CONTRACT}::test_unset_folders_default_to_the_seeds_names_under_the_temporary_directory",
         r"no debug folder")
def debug_folder_renamed():
    """Unset, ``TORCH_NEURONX_DEBUG_DIR`` defaults to a folder named ``neuron_debug`` instead of the
    seeds' ``neuron_backend_``."""
    env = _module(_ENV)
    env._DEFAULT_FACTORIES[env.DEBUG_DIR] = lambda: env._user_tmp("neuron_debug")


@_mutant("001.cache.default-dirs",
         f"{_CONTRACT}::test_unset_folders_default_to_the_seeds_names_under_the_temporary_directory",
         r"no NEFF cache entry")
def neff_cache_folder_renamed():
    """Unset, ``TORCH_NEURONX_NEFF_CACHE_DIR`` defaults to a folder named ``neff`` instead of the
    seeds' ``neff_cache``."""
    env = _module(_ENV)
    env._DEFAULT_FACTORIES[env.NEFF_CACHE_DIR] = lambda: env._user_tmp("neff")


@_mutant("001.cache.shape-per-entry", f"{_KEYS}::test_any_dtype_shape_or_stride_changes_the_key",
         r"keys collide")
def key_ignores_the_shape():
    """The cache key takes the inputs' dtypes and strides but not their shapes, so two shapes share
    one entry."""
    key = _module("reference.cache.key")
    real = key._spec_json

    @functools.wraps(real)
    def no_shape(spec):
        out = real(spec)
        if isinstance(out, dict):
            out = {k: v for k, v in out.items() if k != "shape"}
        elif isinstance(out, (list, tuple)) and len(out) == 3:
            out = [out[0], None, out[2]]
        return out

    key._spec_json = no_shape


@_mutant("001.cache.compiler-version-in-key", f"{_KEYS}::test_any_tool_version_changes_the_key",
         r"keys collide")
def key_ignores_the_compiler_version():
    """The cache key leaves out the compiler's version: an artifact built by another compiler is
    served."""
    key = _module("reference.cache.key")
    real = key.key_components

    @functools.wraps(real)
    def without(*args, **kwargs):
        comps = real(*args, **kwargs)
        comps["versions"] = {k: v for k, v in comps["versions"].items() if k != "compiler"}
        return comps

    key.key_components = without


@_mutant("001.cache.content-addressed", f"{_KEYS}::test_any_change_to_the_hlo_changes_the_key",
         r"keys collide")
def key_ignores_the_hlo():
    """The cache key is made of the arguments, the input specs and the versions only, not the
    graph's content: two graphs of the same signature share one entry."""
    key = _module("reference.cache.key")
    real = key.key_components

    @functools.wraps(real)
    def without(*args, **kwargs):
        comps = real(*args, **kwargs)
        comps["hlo_sha256"] = "-"
        return comps

    key.key_components = without


@_mutant("002.cache.same-32-char-hash", f"{_KEYS}::test_the_key_is_32_lowercase_hex_and_repeatable",
         (r"\[0-9a-f\]\{32\}", r"is not a cache key \(32 lowercase hex characters\)"))
def key_of_40_characters():
    """The cache key is 40 hex characters instead of the seeds' 32."""
    _module("reference.cache.key").KEY_LENGTH = 40


@_mutant("001.env.boolean-spellings", f"{_CONTRACT}::test_a_boolean_variable_with_a_bad_value_names_itself",
         r"Regex pattern did not match|DID NOT RAISE")
def booleans_take_only_one_and_zero():
    """Boolean variables accept only ``1``/``0`` (and say so), not the seeds' ``1``/``true``/``yes``."""
    env = _module(_ENV)
    real = env._parse

    def strict(var, raw):
        if var.kind == "bool" and raw.strip().lower() not in ("1", "0"):
            raise env.EnvVarError(var.name, raw, "1 or 0")
        return real(var, raw)

    env._parse = strict


# --- seed 002: SPMD ---------------------------------------------------------------------------------

_GUARDS = "reference.spmd.guards"


@_mutant("002.rank.runtime-tensor", f"{_GUARD_TESTS}::test_the_rank_is_a_zero_dimensional_int64_tensor_of_its_value",
         r"t\.dtype == torch\.int64")
def rank_tensor_is_int32():
    """The runtime rank is an int32 tensor instead of the seeds' 0-d int64."""
    import torch

    rank = _module("reference.spmd.rank")
    rank.RANK_DTYPE = torch.int32


@_mutant("002.guards.warn-by-default", f"{_GUARD_TESTS}::test_mpmd_twin_warns_by_default", r"DID NOT WARN|warning")
def rank_constant_check_silent_by_default():
    """Without the strict flag the rank-constant check tolerates a baked constant silently instead
    of warning."""
    guards = _module(_GUARDS)
    passes = _module("reference.fx_passes.spmd_passes")
    real = guards.check_rank_constants

    @functools.wraps(real)
    def silent(gm, *, graph_name="<graph>", strict):
        if strict:
            return real(gm, graph_name=graph_name, strict=True)
        return guards.find_rank_constants(gm)

    guards.check_rank_constants = silent
    passes.check_rank_constants = silent


@_mutant("002.guards.rank-constant-strict-raises", f"{_GUARD_TESTS}::test_mpmd_twin_fails_under_strict_naming_node_and_line",
         r"rank_id|spmd\.py")
def strict_error_names_no_source_line():
    """Under the strict flag the rank-constant error names neither the node nor its source line."""
    guards = _module(_GUARDS)
    cls = guards.RankConstant
    cls.describe = lambda self: "a baked constant"


@_mutant("002.guards.num-graphs-agnostic", f"{_GUARD_TESTS}::test_single_artifact_check_passes_a_model_with_many_graphs",
         r"check_single_artifact\(staged, strict=True\) == \[\]")
def several_graphs_count_as_splinters():
    """The single-artifact check expects one staged graph: a model with several distinct graphs
    (prefill, decode buckets, an encoder) is reported as splintered."""
    guards = _module(_GUARDS)
    real = guards.find_splinters

    @functools.wraps(real)
    def one_graph(staged):
        out = real(staged)
        if len(staged) > 1:
            graphs = sorted(staged)
            for g in graphs[1:]:
                for key, ranks in staged[g].items():
                    out.append(guards.Splinter(g, key, tuple(sorted(ranks)), ()))
        return out

    guards.find_splinters = one_graph


@_mutant("002.guards.clean-compiles-silently",
         f"{_GUARD_TESTS}::test_spmd_clean_layer_compiles_silently_in_both_settings[0]", r"rank")
def clean_graphs_warned_about():
    """The rank-constant check warns about every graph with a rank input, baked constant or not."""
    import warnings

    guards = _module(_GUARDS)
    passes = _module("reference.fx_passes.spmd_passes")
    real = guards.check_rank_constants

    @functools.wraps(real)
    def noisy(gm, *, graph_name="<graph>", strict):
        if guards.rank_placeholders(gm) and not guards.find_rank_constants(gm):
            warnings.warn(guards.SPMDWarning(f"graph {graph_name!r} takes a rank input; check it for baked rank values"),
                          stacklevel=2)
        return real(gm, graph_name=graph_name, strict=strict)

    guards.check_rank_constants = noisy
    passes.check_rank_constants = noisy


# --- seed 003: the FX passes ------------------------------------------------------------------------


def _default_passes(reorder) -> None:
    """The default pass manager holds the passes ``reorder(passes)`` returns."""
    fx = _module("reference.fx_passes")
    real = fx.get_default_pass_manager

    @functools.wraps(real)
    def reordered():
        manager = real()
        manager.passes = list(reorder(list(manager.passes)))
        return manager

    for name in ("reference.fx_passes", "reference.pipeline.strategies", _ENTRY):  # where it is looked up
        _module(name).get_default_pass_manager = reordered


def _swap(passes, a: str, b: str):
    names = [p.name for p in passes]
    i, j = names.index(a), names.index(b)
    passes[i], passes[j] = passes[j], passes[i]
    return passes


@_mutant("003.default.order", f"{_FX}::test_default_order", r"names == DEFAULT_ORDER")
def collective_pass_before_kernel_config():
    """The default order runs ``CollectiveReplicaGroupsPass`` before
    ``NkiKernelWriteBackendConfigPass`` (the rank-constant check still last)."""
    _default_passes(lambda ps: _swap(ps, "CollectiveReplicaGroupsPass", "NkiKernelWriteBackendConfigPass"))


@_mutant("002.guards.rank-constant-pass-last", f"{_FX}::test_default_order", r"names == DEFAULT_ORDER")
def rank_constant_check_runs_first():
    """``RankConstantCheckPass`` runs first instead of last, on a graph the other passes have not
    rewritten yet."""
    _default_passes(lambda ps: [p for p in ps if p.name == "RankConstantCheckPass"]
                    + [p for p in ps if p.name != "RankConstantCheckPass"])


@_mutant("003.default.aliasing-before-inplace", f"{_FX}::test_an_output_that_is_a_mutated_input_is_the_callers_tensor",
         r"eager returns the input itself|writing the output writes the caller's tensor|input after the call")
def inplace_rewrite_before_aliasing():
    """The in-place rewrite runs before the aliasing analysis, which then no longer sees that an
    output is a mutated input."""
    _default_passes(lambda ps: _swap(ps, "AliasingOutputRewritePass", "InPlaceToOutOfPlacePass"))


@_mutant("003.manager.debug-timing", f"{_FX}::test_each_pass_logs_its_time_at_debug_in_the_seeds_words",
         r"\[m\.group\(1\) for m in timed\] == names")
def pass_timing_in_milliseconds():
    """Each pass's DEBUG line gives milliseconds in other words (``pass X: 1.2 ms``) instead of the
    seeds' ``FX Pass 'X' completed in 0.0012s``."""
    import logging

    logger_debug = logging.Logger.debug

    def respelled(self, msg, *args, **kwargs):
        if isinstance(msg, str) and msg.startswith("FX Pass '%s' completed in"):
            name, seconds = args[0], args[1]
            return logger_debug(self, "pass %s: %.1f ms", name, seconds * 1000)
        return logger_debug(self, msg, *args, **kwargs)

    logging.Logger.debug = respelled


@_mutant("003.config.enable-fx-passes", f"{_FX}::test_enable_fx_passes_false_skips_the_stage",
         r'"enable_fx_passes": False\}\) == \[\]')
def enable_fx_passes_false_ignored():
    """``enable_fx_passes=False`` is accepted but the pass stage runs anyway."""
    import dataclasses

    home = _module(_ENTRY)
    real = home.resolve_request

    @functools.wraps(real)
    def always(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), enable_fx_passes=True)

    home.resolve_request = always


@_mutant("003.config.target-device", f"{_FX}::test_a_bad_target_device_is_named", r"DID NOT RAISE|target_device")
def bad_target_device_becomes_cpu():
    """A ``target_device`` that is not a device is replaced by the CPU instead of refused naming
    the option."""
    import dataclasses

    import torch

    home = _module(_ENTRY)
    real = home.resolve_request

    @functools.wraps(real)
    def lenient(*args, **kwargs):
        request = real(*args, **kwargs)
        try:
            torch.device(request.target_device)
        except (RuntimeError, ValueError):
            request = dataclasses.replace(request, target_device="cpu")
        return request

    home.resolve_request = lenient


@_mutant("003.config.target-device-xla",
         f"{_FX}::test_without_a_target_device_the_device_rewriter_moves_the_graph_where_it_runs",
         r"the rewritten graph ran on meta|device\(type='meta'\)")
def default_target_device_is_meta():
    """Without a ``target_device`` the device rewriter moves graphs to ``meta`` (neither the seeds'
    ``xla`` nor a device the reference runs on)."""
    ctx = _module("reference.fx_passes.base").PassContext
    of = ctx.of.__func__

    def meta_default(cls, **kwargs):
        kwargs.setdefault("target_device", "meta")
        return of(cls, **kwargs)

    ctx.of = classmethod(meta_default)


def _no_op(cls_path: str, name: str) -> None:
    module = _module(cls_path)
    getattr(module, name).transform = lambda self, gm, ctx: gm


@_mutant("003.passes.device-rewriter",
         f"{_FX}::test_without_a_target_device_the_device_rewriter_moves_the_graph_where_it_runs",
         r'"cuda" not in gm\.code')
def device_rewriter_does_nothing():
    """``DeviceRewriterPass`` leaves every device as the graph names it."""
    _no_op("reference.fx_passes.device_rewriter", "DeviceRewriterPass")


@_mutant("003.passes.nki-backend-config", f"{_FX}::test_a_kernel_writing_into_a_callers_buffer",
         # the write is lost, or the kernel call, left unconfigured, cannot be lowered at all
         (r"buffer the kernel wrote", r"LoweringError"))
def kernel_write_back_dropped():
    """``NkiKernelWriteBackendConfigPass`` does nothing: a kernel call that writes into a caller's
    buffer (``mutates_args``) is left without the configuration that hands the write back."""
    _no_op("reference.fx_passes.backend_config_pass", "NkiKernelWriteBackendConfigPass")


@_mutant("003.interface.fxpass", f"{_FX}::test_each_default_pass_runs_alone_on_a_graph_module_and_keeps_its_values",
         r"not a GraphModule")
def a_pass_returns_its_graph():
    """``FXPass.run`` returns the transformed ``torch.fx.Graph`` instead of a ``GraphModule``."""
    base = _module("reference.fx_passes.base")
    real = base.FXPass.run

    def graph(self, gm, **kwargs):
        return real(self, gm, **kwargs).graph

    base.FXPass.run = graph


@_mutant("003.manager.run-passes", f"{_FX}::test_every_default_pass_runs_when_enabled",
         r"passes_applied\(.*\) == _pass_names\(impl\)")
def run_passes_skips_the_last():
    """``run_passes`` stops before the last pass of the manager."""
    fx = _module("reference.fx_passes.pass_manager")
    real = fx.FXPassManager.run_passes

    def all_but_last(self, gm, ctx=None, **kwargs):
        passes = self.passes
        self.passes = passes[:-1]
        try:
            return real(self, gm, ctx, **kwargs)
        finally:
            self.passes = passes

    fx.FXPassManager.run_passes = all_but_last



# --- seed 001, read again: the boolean variables' defaults, the helper API's shapes ----------------

_DEFAULTS_TEST = f"{_CONTRACT}::test_each_boolean_variable_defaults_as_the_seed_says"


def _default_flipped(name: str):
    def patch():
        env = _module(_ENV)
        _env_default(name, not env._VARS[name].default)

    return patch


for _var, _sid, _mutant_name in (
    ("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "001.env.preserve-artifacts-default", "artifacts_preserved_by_default"),
    ("TORCH_NEURONX_COMPILE_ONLY", "001.env.compile-only-default", "compile_only_by_default"),
    ("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "001.env.disable-cpu-autocopy-default", "cpu_autocopy_off_by_default"),
    ("TORCH_NEURONX_RETAIN_DEVICE_MODE", "001.env.retain-device-mode-default", "device_mode_retained_by_default"),
    ("TORCH_NEURONX_ENABLE_NKI_SDPA", "001.env.nki-sdpa", "nki_sdpa_off_by_default"),
    ("TORCH_NEURONX_NEFF_DISABLE_CACHE", "001.cache.disable-cache-default", "cache_disabled_by_default"),
    ("TORCH_CACHING_PRECOMPILE", "001.cache.caching-precompile-default", "precompile_on_by_default"),
):
    _flip = _default_flipped(_var)
    _flip.__name__ = _flip.__qualname__ = _mutant_name
    _flip.__doc__ = f"``{_var}`` defaults to the opposite of the seed's default."
    globals()[_mutant_name] = _mutant(_sid, f"{_DEFAULTS_TEST}[{_var}]", rf"{_var} defaults to")(_flip)
del _var, _sid, _mutant_name, _flip


@_mutant("001.helper.set-model-name-later", f"{_CONTRACT}::test_a_model_name_names_only_the_graphs_compiled_after_it",
         r"named_later")
def model_name_renames_earlier_graphs():
    """A metrics record reads the model name when it is read, not when its graph was compiled:
    ``set_model_name`` renames the graphs compiled before it."""
    settings = _module("reference.core.settings")
    _records_with(model_name=lambda m: settings.get_model_name())


@_mutant("001.helper.get-rank-returns-int", f"{_CONTRACT}::test_the_helper_api_returns_the_seeds_types",
         r"get_rank\(\) returned")
def rank_as_a_string():
    """``get_rank()`` returns the rank as a string (``"0"``) instead of an int."""
    reference = _module("reference")
    real = reference.get_rank
    reference.get_rank = lambda: str(real())


@_mutant("001.helper.errors-subclass-exception", f"{_CONTRACT}::test_the_helper_api_returns_the_seeds_types",
         r"is not a subclass of Exception")
def execution_error_outside_exception():
    """The exported ``NEFFExecutionError`` derives from ``BaseException`` only, so ``except
    Exception`` does not catch it."""
    reference = _module("reference")

    class NEFFExecutionError(BaseException):
        """Raised when NEFF execution fails (derived from BaseException)."""

    reference.NEFFExecutionError = NEFFExecutionError


@_mutant("001.env.compile-only-runtime-init", f"{_CONTRACT}::test_in_compile_only_mode_a_failing_runtime_does_not_fail_the_call",
         r"compile-only mode ran the compiled graph")
def compile_only_still_runs():
    """Compile-only mode loads and runs the compiled graph (then returns the eager result), so a
    runtime that fails to start fails the call."""
    serving = _module("reference.pipeline.serving")
    cls = serving.CompiledGraph
    call = cls.__call__

    def run_anyway(self, *args):
        if self.loaded is None and self.lowering is not None:
            serving.METRICS.bump("compiled_runs")  # the compiled graph runs, as outside compile-only mode
            serving.load(self.built, self.lowering, resident=None)(*args)
        return call(self, *args)

    cls.__call__ = run_anyway



@_mutant("001.breaks.diagnostic-names-op-and-reason", f"{_CONTRACT}::test_an_op_with_no_lowering_breaks_the_graph[function]",
         r"does not give the reported reason")
def diagnostic_without_the_reason():
    """A forced graph break's diagnostic names the operation but not why it breaks."""
    import dataclasses

    home = _module(_GRAPH_BREAKS)
    real = home._raise

    def unexplained(decision, form):
        return real(dataclasses.replace(decision, reason="not supported"), form)

    home._raise = unexplained


@_mutant("000.helper.pure", f"{_SCOPE}::test_level_is_replaced_in_any_form_and_other_flags_keep_their_order",
         r"modified its input")
def level_helper_edits_its_input():
    """``with_optimization_level`` writes the new list into the one it was given as well as
    returning it."""
    home = _module(_OPT_LEVEL)
    real = home.with_optimization_level

    @functools.wraps(real)
    def in_place(args, level):
        out = real(args, level)
        if isinstance(args, list):
            args[:] = out
        return out

    home.with_optimization_level = in_place
    for name in ("reference.runner", "reference.runner.model_loading", "reference"):
        module = _module(name)
        if getattr(module, "with_optimization_level", None) is real:
            module.with_optimization_level = in_place



_VALUES_TEST = f"{_CONTRACT}::test_each_valued_variable_defaults_as_the_seed_says"


@_mutant("001.cache.lock-timeout", f"{_VALUES_TEST}[TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT]",
         r"TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT defaults to")
def lock_timeout_of_ten_minutes():
    """``TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT`` defaults to 600 seconds instead of the seed's 1200."""
    _env_default(_module(_ENV).NEFF_CACHE_LOCK_TIMEOUT, 600)


@_mutant("001.env.cc-flags", f"{_VALUES_TEST}[NEURON_CC_FLAGS]", r"NEURON_CC_FLAGS defaults to")
def cc_flags_default_to_a_level():
    """Unset, ``NEURON_CC_FLAGS`` adds ``-O2`` to every compile instead of nothing."""
    _env_default(_module(_ENV).CC_FLAGS, "-O2")


@_mutant("001.metrics.enabled-tables-default", f"{_VALUES_TEST}[TORCH_NEURONX_ENABLED_METRIC_TABLES]",
         r"TORCH_NEURONX_ENABLED_METRIC_TABLES defaults to")
def graph_stats_on_by_default():
    """Unset, ``TORCH_NEURONX_ENABLED_METRIC_TABLES`` writes the ``graph_stats`` table instead of
    none."""
    _env_default(_module(_ENV).ENABLED_METRIC_TABLES, ("graph_stats",))


# the factories registered above, for ``from conformance.selfcheck.mutants_statements import *``
__all__ = [name for name, m in MUTANTS.items() if m.module == __name__]
