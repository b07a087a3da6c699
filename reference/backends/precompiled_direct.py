"""A precompiled variant that runs without Dynamo: Dynamo's own generated code around the compiled
graph, behind guards of the reference's own.

What ``aot_compile`` hands back runs, once its guards pass, plain Python bytecode that Dynamo
generated for the traced function: it reads the graph's inputs off the arguments (a module's
parameters included), calls the compiled graph, replays side effects and builds the return value.
Nothing in that code needs Dynamo; torch's loader does (``torch._dynamo.aot_compile``: about 1 s of
a process's start here), and so do its guards (a guard manager rebuilt from Dynamo's state).

So :func:`reference.precompile` also writes each variant in a second form (:func:`describe`): the
bytecode (``marshal``), the compiled graph's own bytes
(:func:`reference.backends.graph_record.pack`), the module aliases the code's globals name, and a
guard description made from the example inputs (:class:`Guards`). :func:`reference.load_precompiled`
runs a variant in this form when its guards accept the call, importing no Dynamo at all; a call
they refuse goes to torch's form of the variants (Dynamo imported then, once), whose guards decide
as before. The guards here are therefore stricter than Dynamo's, never looser: every tensor's
type, dtype, shape, strides, device and ``requires_grad``, which inputs are the same tensor, every
plain value (``None``, bool, int, float, str, and tuples, lists and dicts of them, dtypes and
devices) among the arguments and among a module's attributes, each submodule's type and training
flag, the names of its parameters and buffers, no hooks, and the global state Dynamo guards
(grad mode, inference mode, default dtype, deterministic algorithms, CPU autocast). A variant
whose code needs anything else (a closure, a global of the traced function's module, an argument
of another type) is written in torch's form only (:func:`describe` says why).

This module imports no Dynamo: it reads torch's object through
:func:`reference.core.torch_compat.aot_runtime_parts`, which the compile side passes in.
"""

from __future__ import annotations

import builtins
import dis
import importlib
import inspect
import marshal
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from reference.core.torch_runtime import DYNAMO_STAND_INS, dict_version, tensor_match

__all__ = ["NotDirect", "Guards", "DirectVariant", "describe", "python_tag", "load"]


class NotDirect(Exception):
    """A variant that cannot run without Dynamo (the message says why); it travels in torch's form only."""


def python_tag() -> str:
    """The interpreter whose bytecode a direct variant holds (``marshal`` is per version)."""
    return f"{sys.implementation.cache_tag}:{sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}"


# --- guards ---------------------------------------------------------------------------------------

_CONSTS = (type(None), bool, int, float, str)
# Dicts on a module that hold its structure or hooks, not values its forward reads.
_MODULE_INTERNALS = frozenset({
    "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "_state_dict_hooks",
    "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
    "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_is_full_backward_hook",
    "_compiled_call_impl", "training",
})
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


def _type_name(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def _global_state() -> dict[str, Any]:
    return {
        "grad": torch.is_grad_enabled(), "inference": torch.is_inference_mode_enabled(),
        "default_dtype": str(torch.get_default_dtype()), "deterministic": torch.are_deterministic_algorithms_enabled(),
        "autocast_cpu": torch.is_autocast_enabled("cpu"),
    }


def _no_hooks(module: torch.nn.Module) -> bool:
    mod = sys.modules[torch.nn.Module.__module__]
    if any(getattr(mod, name, None) for name in _GLOBAL_HOOKS):
        return False
    return not any(getattr(m, h, None) for m in module.modules() for h in _HOOKS)


class _Describer:
    """Walks example arguments into a JSON guard description; collects the tensors in order."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []

    def value(self, v: Any, where: str) -> dict:
        if isinstance(v, torch.Tensor):
            return self.tensor(v, where)
        if type(v) in _CONSTS:
            return {"k": "const", "type": type(v).__name__, "v": v}
        if type(v) in (tuple, list):
            return {"k": type(v).__name__, "items": [self.value(x, f"{where}[{i}]") for i, x in enumerate(v)]}
        if type(v) is dict and all(type(k) is str for k in v):
            return {"k": "dict", "keys": list(v), "items": [self.value(x, f"{where}[{k!r}]") for k, x in v.items()]}
        if isinstance(v, torch.dtype):
            return {"k": "dtype", "v": str(v)}
        if isinstance(v, torch.device):
            return {"k": "device", "v": str(v)}
        if isinstance(v, torch.nn.Module):
            return self.module(v, where)
        raise NotDirect(f"{where} is a {type(v).__name__}, which the reference's own guards do not describe")

    def tensor(self, t: torch.Tensor, where: str) -> dict:
        if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.is_sparse or t.layout is not torch.strided:
            raise NotDirect(f"{where} is a {type(t).__name__} of layout {t.layout}, not a plain strided tensor")
        self.tensors.append(t)
        return {"k": "tensor", "type": type(t).__name__, "dtype": str(t.dtype), "shape": list(t.shape),
                "stride": list(t.stride()), "device": str(t.device), "grad": bool(t.requires_grad)}

    def plain(self, v: Any) -> dict | None:
        """A module attribute's description, or ``None`` for one the guards leave alone."""
        if type(v) in _CONSTS or isinstance(v, (torch.dtype, torch.device)):
            return self.value(v, "")
        if type(v) in (tuple, list, dict):
            try:
                return _Describer().value(v, "")  # values only: no tensor among them
            except NotDirect:
                return None
        return None

    def module(self, module: torch.nn.Module, where: str) -> dict:
        if not _no_hooks(module):
            raise NotDirect(f"{where} or one of its submodules has hooks")
        modules = []
        for path, m in module.named_modules(remove_duplicate=False):
            attrs = []  # [name, description] in the module's own order (a JSON object's is not kept)
            for name, v in vars(m).items():
                if name in _MODULE_INTERNALS:
                    continue
                if isinstance(v, torch.Tensor):
                    attrs.append([name, self.tensor(v, f"{where}.{path}.{name}".replace("..", "."))])
                    continue
                desc = self.plain(v)
                if desc is not None and not any(isinstance(x, torch.Tensor) for x in _leaves(v)):
                    attrs.append([name, desc])
            modules.append({"path": path, "type": _type_name(type(m)), "training": m.training, "attrs": attrs})
        tensors = [[name, self.tensor(t, f"{where}.{name}")] for name, t in module.named_parameters(remove_duplicate=False)]
        n_params = len(tensors)
        tensors += [[name, self.tensor(t, f"{where}.{name}")] for name, t in module.named_buffers(remove_duplicate=False)]
        return {"k": "module", "modules": modules, "tensors": tensors, "params": n_params}


def _leaves(v: Any):
    if type(v) in (tuple, list):
        for x in v:
            yield from _leaves(x)
    elif type(v) is dict:
        for x in v.values():
            yield from _leaves(x)
    else:
        yield v


class _Refused(Exception):
    """Inside :meth:`Guards.check`: the first difference found, said in words."""


class _Checker:
    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []

    def value(self, spec: Mapping[str, Any], v: Any, where: str) -> None:
        k = spec["k"]
        if k == "tensor":
            self.tensor(spec, v, where)
        elif k == "const":
            if type(v).__name__ != spec["type"] or v != spec["v"]:
                raise _Refused(f"{where} is {v!r}, the variant was compiled for {spec['v']!r}")
        elif k in ("tuple", "list"):
            if type(v).__name__ != k or len(v) != len(spec["items"]):
                raise _Refused(f"{where} is not a {k} of {len(spec['items'])}")
            for i, (s, x) in enumerate(zip(spec["items"], v)):
                self.value(s, x, f"{where}[{i}]")
        elif k == "dict":
            if type(v) is not dict or list(v) != spec["keys"]:
                raise _Refused(f"{where} does not have the keys {spec['keys']}")
            for key, s in zip(spec["keys"], spec["items"]):
                self.value(s, v[key], f"{where}[{key!r}]")
        elif k in ("dtype", "device"):
            if not isinstance(v, torch.dtype if k == "dtype" else torch.device) or str(v) != spec["v"]:
                raise _Refused(f"{where} is {v!r}, the variant was compiled for {spec['v']}")
        elif k == "module":
            self.module(spec, v, where)
        else:
            raise _Refused(f"{where}: a guard of unknown kind {k!r}")

    def tensor(self, spec: Mapping[str, Any], t: Any, where: str) -> None:
        if type(t).__name__ != spec["type"] or not isinstance(t, torch.Tensor):
            raise _Refused(f"{where} is a {type(t).__name__}, the variant was compiled for a {spec['type']}")
        if (str(t.dtype) != spec["dtype"] or list(t.shape) != spec["shape"] or list(t.stride()) != spec["stride"]
                or str(t.device) != spec["device"] or t.requires_grad != spec["grad"]):
            raise _Refused(
                f"{where} is {t.dtype} {tuple(t.shape)} strides {t.stride()} on {t.device} requires_grad={t.requires_grad}, "
                f"the variant was compiled for {spec['dtype']} {tuple(spec['shape'])} strides {tuple(spec['stride'])} "
                f"on {spec['device']} requires_grad={spec['grad']}"
            )
        self.tensors.append(t)

    def module(self, spec: Mapping[str, Any], module: Any, where: str) -> None:
        if not isinstance(module, torch.nn.Module):
            raise _Refused(f"{where} is a {type(module).__name__}, not a module")
        if not _no_hooks(module):
            raise _Refused(f"{where} or one of its submodules has hooks")
        found = list(module.named_modules(remove_duplicate=False))
        if len(found) != len(spec["modules"]):
            raise _Refused(f"{where} has {len(found)} submodules, the variant was compiled for {len(spec['modules'])}")
        for (path, m), s in zip(found, spec["modules"]):
            at = f"{where}.{path}" if path else where
            if path != s["path"] or _type_name(type(m)) != s["type"] or m.training != s["training"]:
                raise _Refused(f"{at} is a {_type_name(type(m))} (training={m.training}), the variant was compiled for "
                               f"{s['type']} at {s['path'] or 'the top'} (training={s['training']})")
            attrs = vars(m)
            for name, a in s["attrs"]:
                if name not in attrs:
                    raise _Refused(f"{at} has no attribute {name!r}")
                self.value(a, attrs[name], f"{at}.{name}")
        tensors = list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))
        if [n for n, _ in tensors] != [n for n, _ in spec["tensors"]]:
            raise _Refused(f"{where}'s parameters and buffers are not those the variant was compiled for")
        for (name, t), (_, s) in zip(tensors, spec["tensors"]):
            self.tensor(s, t, f"{where}.{name}")


# --- the same checks, made once into closures: what a call pays --------------------------------------
# (the walk above builds words for a refusal; a call that passes needs only a yes, about 0.5 µs a
# tensor here, against 2-4 µs for the walk with its strings and generators)

_Check = Callable[[Any, list], bool]


def _dtype(name: str) -> torch.dtype:
    value = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"{name!r} is not a dtype")
    return value


def _fast(spec: Mapping[str, Any]) -> _Check:
    k = spec["k"]
    if k == "tensor":
        return _fast_tensor(spec)
    if k == "const":
        want, want_type = spec["v"], {"NoneType": type(None), "bool": bool, "int": int, "float": float, "str": str}[spec["type"]]
        return lambda v, tensors: type(v) is want_type and v == want
    if k in ("tuple", "list"):
        seq_type, items = (tuple if k == "tuple" else list), [_fast(i) for i in spec["items"]]
        n = len(items)
        return lambda v, tensors: type(v) is seq_type and len(v) == n and all(c(x, tensors) for c, x in zip(items, v))
    if k == "dict":
        keys, items = list(spec["keys"]), [_fast(i) for i in spec["items"]]
        return lambda v, tensors: type(v) is dict and list(v) == keys and all(c(v[key], tensors) for key, c in zip(keys, items))
    if k == "dtype":
        want = _dtype(spec["v"])
        return lambda v, tensors: v is want
    if k == "device":
        want = torch.device(spec["v"])
        return lambda v, tensors: isinstance(v, torch.device) and v == want
    if k == "module":
        return _fast_module(spec)
    raise ValueError(f"a guard of unknown kind {k!r}")


def _fast_tensor(spec: Mapping[str, Any]) -> _Check:
    cls = torch.nn.Parameter if spec["type"] == "Parameter" else torch.Tensor
    dtype, shape, stride = _dtype(spec["dtype"]), torch.Size(spec["shape"]), tuple(spec["stride"])
    device, grad = torch.device(spec["device"]), bool(spec["grad"])

    def check(t: Any, tensors: list) -> bool:
        if (type(t) is not cls or t.dtype is not dtype or t.shape != shape or t.stride() != stride
                or t.requires_grad is not grad or t.device != device):
            return False
        tensors.append(t)
        return True

    return check


def _fast_module(spec: Mapping[str, Any]) -> _Check:
    return _ModuleCheck(spec).check


def _hooked(m: torch.nn.Module) -> bool:
    return bool(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks)


def _versions(mods: list) -> list:
    return [(dict_version(m.__dict__), dict_version(m._modules), dict_version(m._parameters), dict_version(m._buffers))
            for m in mods]


class _ModuleCheck:
    """A module's guard, made once from its description: each submodule reached through its
    parent's ``_modules``; its type, training flag, hooks, children and attributes; the names of
    its parameters and buffers and every one of those tensors, in ``named_parameters`` /
    ``named_buffers`` order. A call over the same module objects with none of their dicts written
    since the last call that passed checks only its tensors (in C++) and that no hook is set."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        entries = spec["modules"]
        position = {e["path"]: i for i, e in enumerate(entries)}
        self.children: list[list[str]] = [[] for _ in entries]
        self.steps = []  # (parent's position, child's name): how each module after the first is reached
        for i, e in enumerate(entries[1:], 1):
            parent, _, name = e["path"].rpartition(".")
            if parent not in position or position[parent] >= i:
                raise ValueError("the module tree is not in named_modules order")
            self.children[position[parent]].append(name)
            self.steps.append((position[parent], name))
        n_params = int(spec["params"])
        self.owned = [([], []) for _ in entries]  # per module: its parameters' and its buffers' own names
        for j, (name, _) in enumerate(spec["tensors"]):
            parent, _, own = name.rpartition(".")
            if parent not in position:
                raise ValueError(f"tensor {name!r} belongs to no module of the tree")
            self.owned[position[parent]][0 if j < n_params else 1].append(own)
        self.tensor_checks = [_fast_tensor(t) for _, t in spec["tensors"]]
        self.types = [e["type"] for e in entries]
        self.training = [bool(e["training"]) for e in entries]
        self.attrs = [[(n, _fast(a)) for n, a in e["attrs"]] for e in entries]
        self.tensor_attrs = [[n for n, a in e["attrs"] if a["k"] == "tensor"] for e in entries]
        self.last_mods: list | None = None  # from the last call that passed: the modules,
        self.last_versions: list | None = None  # their dicts' versions,
        self.last_match: Callable[..., bool] | None = None  # and the C++ check of their tensors

    def check(self, module: Any, tensors: list) -> bool:
        if not isinstance(module, torch.nn.Module) or any(getattr(_NN, h) for h in _GLOBAL_HOOKS):
            return False
        mods = [module]
        for parent, name in self.steps:
            child = mods[parent]._modules.get(name)
            if child is None:
                return False
            mods.append(child)
        seen = self.last_mods
        if (seen is not None and len(seen) == len(mods) and all(a is b for a, b in zip(seen, mods))
                and _versions(mods) == self.last_versions and not any(_hooked(m) for m in mods)):
            found = [m.__dict__[name] for i, m in enumerate(mods) for name in self.tensor_attrs[i]]
            found += [m._parameters[k] for i, m in enumerate(mods) for k in self.owned[i][0]]
            found += [m._buffers[k] for i, m in enumerate(mods) for k in self.owned[i][1]]
            if not self.last_match(*found):
                return False
            tensors += found
            return True
        before = len(tensors)
        if not self._structure(mods, tensors):
            return False
        self.last_mods, self.last_versions, self.last_match = mods, _versions(mods), tensor_match(tensors[before:])
        return True

    def _structure(self, mods: list, tensors: list) -> bool:
        for i, m in enumerate(mods):
            t = type(m)
            if (f"{t.__module__}.{t.__qualname__}" != self.types[i] or m.training is not self.training[i] or _hooked(m)
                    or [k for k, c in m._modules.items() if c is not None] != self.children[i]):
                return False
            d = m.__dict__
            for name, c in self.attrs[i]:
                if name not in d or not c(d[name], tensors):
                    return False
        found = []
        for kind, table in ((0, "_parameters"), (1, "_buffers")):
            for i, m in enumerate(mods):
                owned = [(k, v) for k, v in getattr(m, table).items() if v is not None]
                if [k for k, _ in owned] != self.owned[i][kind]:
                    return False
                found += owned
        return all(c(t, tensors) for (_, t), c in zip(found, self.tensor_checks))


_NN = sys.modules[torch.nn.Module.__module__]


def _identity_pattern(tensors: list[torch.Tensor]) -> list[int]:
    """For each tensor, the position of the first one that is the same object."""
    first: dict[int, int] = {}
    return [first.setdefault(id(t), i) for i, t in enumerate(tensors)]


@dataclass(frozen=True)
class Guards:
    """The reference's guards of one variant: its bound arguments' description, which of their
    tensors are the same object, and the global state (see the module doc)."""

    arguments: tuple  # (parameter name, description), in the signature's order
    same: tuple[int, ...]
    state: Mapping[str, Any]

    @classmethod
    def of(cls, bound: Mapping[str, Any]) -> "Guards":
        walker = _Describer()
        arguments = tuple((name, walker.value(v, name)) for name, v in bound.items())
        return cls(arguments, tuple(_identity_pattern(walker.tensors)), _global_state())

    def as_json(self) -> dict[str, Any]:
        return {"arguments": [list(a) for a in self.arguments], "same": list(self.same), "state": dict(self.state)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Guards":
        return cls(tuple((str(n), a) for n, a in doc["arguments"]), tuple(int(i) for i in doc["same"]), dict(doc["state"]))

    def fast(self) -> Callable[[Mapping[str, Any]], bool]:
        """The check as one callable made once: whether the bound arguments (and the global state
        now) pass. :meth:`refusal` says why not."""
        checks = [(name, _fast(spec)) for name, spec in self.arguments]
        names, same, state = [n for n, _ in checks], list(self.same), dict(self.state)
        want_dtype = _dtype(state["default_dtype"])
        grad, inference, deterministic, autocast = state["grad"], state["inference"], state["deterministic"], state["autocast_cpu"]

        def passes(bound: Mapping[str, Any]) -> bool:
            if (torch.is_grad_enabled() is not grad or torch.is_inference_mode_enabled() is not inference
                    or torch.get_default_dtype() is not want_dtype
                    or torch.are_deterministic_algorithms_enabled() is not deterministic
                    or torch.is_autocast_enabled("cpu") is not autocast or list(bound) != names):
                return False
            tensors: list = []
            for name, check in checks:
                if not check(bound[name], tensors):
                    return False
            return _identity_pattern(tensors) == same

        return passes

    def refusal(self, bound: Mapping[str, Any]) -> str | None:
        """``None`` when the bound arguments (and the global state now) pass; else the first
        difference, in words."""
        state = _global_state()
        if state != self.state:
            differ = [f"{k}={state[k]!r} (compiled with {self.state.get(k)!r})" for k in state if state[k] != self.state.get(k)]
            return "global state differs: " + ", ".join(differ)
        names = [n for n, _ in self.arguments]
        if list(bound) != names:
            return f"the arguments are {list(bound)}, the variant was compiled for {names}"
        checker = _Checker()
        try:
            for name, spec in self.arguments:
                checker.value(spec, bound[name], name)
        except _Refused as exc:
            return str(exc)
        if tuple(_identity_pattern(checker.tensors)) != self.same:
            return "the inputs that are the same tensor are not those the variant was compiled with"
        return None


# --- the variant ----------------------------------------------------------------------------------


def _global_names(code: types.CodeType) -> set[str]:
    """Every global the code (and the code it nests) reads; raises :class:`NotDirect` on one it writes."""
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            raise NotDirect(f"Dynamo's code for it writes the global {ins.argval!r}")
        if ins.opname == "LOAD_GLOBAL":
            names.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _attributes_used(code: types.CodeType, alias: str) -> set[str] | None:
    """The attributes the code (and the code it nests) reads off the global ``alias``; ``None``
    when it uses the object itself otherwise."""
    used: set[str] = set()
    instructions = list(dis.get_instructions(code))
    for ins, nxt in zip(instructions, instructions[1:] + [None]):
        if ins.opname == "LOAD_GLOBAL" and ins.argval == alias:
            if nxt is None or nxt.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
                return None
            used.add(nxt.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner = _attributes_used(const, alias)
            if inner is None:
                return None
            used |= inner
    return used


def _module_for(name: str) -> Any:
    """What a module alias of the generated code stands for here: the module, or for one of
    Dynamo's, its stand-in (:data:`reference.core.torch_runtime.DYNAMO_STAND_INS`)."""
    stand_in = DYNAMO_STAND_INS.get(name)
    return stand_in if stand_in is not None else importlib.import_module(name)


def _json_plain(v: Any) -> bool:
    if type(v) in _CONSTS:
        return True
    if type(v) in (tuple, list):
        return all(_json_plain(x) for x in v)
    return False


def describe(parts: Any, args: tuple, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], bytes]:
    """The direct form of one AOT-compiled variant: its JSON description and its code's bytes.

    ``parts`` is :func:`reference.core.torch_compat.aot_runtime_parts` of the variant, ``args`` and
    ``kwargs`` the example inputs it was compiled for (a module first, for a module). Raises
    :class:`NotDirect` saying why when the variant needs Dynamo to run."""
    if parts.closure:
        raise NotDirect("the traced function has a closure")
    if any(not _json_plain(v) for v in parts.used_globals.values()):
        raise NotDirect("Dynamo's code for it reads captured values that are not plain constants")
    if parts.argdefs is not None and not _json_plain(list(parts.argdefs)):
        raise NotDirect("the traced function has defaults that are not plain constants")
    if parts.kwdefaults and not all(_json_plain(v) for v in parts.kwdefaults.values()):
        raise NotDirect("the traced function has keyword defaults that are not plain constants")
    known = set(parts.import_sources) | set(parts.used_globals) | {parts.backend_id} | set(dir(builtins))
    unknown = (_global_names(parts.bytecode) | set(parts.external_refs)) - known
    if unknown:
        raise NotDirect(f"Dynamo's code for it reads the globals {sorted(unknown)} of the traced function's module")
    for alias, name in parts.import_sources.items():
        if name == "torch._dynamo" or name.startswith("torch._dynamo."):
            stand_in = DYNAMO_STAND_INS.get(name)
            used = _attributes_used(parts.bytecode, alias)
            if stand_in is None or used is None or any(not hasattr(stand_in, a) for a in used):
                raise NotDirect(f"Dynamo's code for it uses {name} ({sorted(used or ())}), which has no stand-in here")
    bound = parts.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    guards = Guards.of(bound.arguments)
    doc = {
        "python": python_tag(), "name": parts.bytecode.co_name, "backend_id": parts.backend_id,
        "import_sources": dict(parts.import_sources), "used_globals": dict(parts.used_globals),
        "argdefs": list(parts.argdefs) if parts.argdefs is not None else None,
        "kwdefaults": dict(parts.kwdefaults) if parts.kwdefaults else None, "guards": guards.as_json(),
    }
    return doc, marshal.dumps(parts.bytecode)


class DirectVariant:
    """One variant loaded in its direct form: :meth:`refusal` checks a call's inputs, a call runs
    Dynamo's generated code with the compiled graph under its name."""

    def __init__(self, doc: Mapping[str, Any], code: bytes, graph: Callable) -> None:
        bytecode = marshal.loads(code)
        if not isinstance(bytecode, types.CodeType):
            raise ValueError("the variant's code is not a code object")
        f_globals: dict[str, Any] = {alias: _module_for(name) for alias, name in doc["import_sources"].items()}
        f_globals.update({k: tuple(v) if isinstance(v, list) else v for k, v in doc["used_globals"].items()})
        f_globals[doc["backend_id"]] = graph
        argdefs = tuple(doc["argdefs"]) if doc["argdefs"] is not None else None
        self._fn = types.FunctionType(bytecode, f_globals, str(doc["name"]), argdefs)
        if doc["kwdefaults"]:
            self._fn.__kwdefaults__ = dict(doc["kwdefaults"])
        self._signature = inspect.signature(self._fn)
        self.guards = Guards.from_json(doc["guards"])
        self._passes = self.guards.fast()

    def accepts(self, args: tuple, kwargs: Mapping[str, Any]) -> bool:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError:
            return False
        bound.apply_defaults()
        return self._passes(bound.arguments)

    def refusal(self, args: tuple, kwargs: Mapping[str, Any]) -> str | None:
        """``None`` when the guards accept the call; else the first difference, in words."""
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            return f"the arguments do not fit the signature ({exc})"
        bound.apply_defaults()
        return self.guards.refusal(bound.arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)


def load(doc: Mapping[str, Any], code: bytes, graph: Callable) -> DirectVariant:
    """:class:`DirectVariant` of a description :func:`describe` made (checked by the caller)."""
    return DirectVariant(doc, code, graph)
