"""Unit tests of ``@support_torch_compile``. The level's backend is replaced by Dynamo's ``eager``
backend (a faked neighbour): these tests are about the decorator, not a compiler."""

from __future__ import annotations

from typing import Optional

import pytest
import torch

import reference.atom as atom
from reference.atom import decorators


@pytest.fixture
def eager_backend(monkeypatch):
    monkeypatch.setattr(decorators, "level_backend", lambda config, prefix="": "eager")


def _config(level, tmp_path=None, **cc):
    if tmp_path is not None:
        cc["debug_dump_path"] = str(tmp_path)
    return atom.Config(compilation_config=atom.CompilationConfig(level=level, **cc))


def _model_class():
    class Scaled(torch.nn.Module):
        def __init__(self, factor: float = 2.0) -> None:
            super().__init__()
            self.factor = factor
            self.fail = False

        def forward(self, x: torch.Tensor, y: Optional[torch.Tensor] = None, n: int = 1) -> torch.Tensor:
            if self.fail:
                raise RuntimeError("boom")
            out = x * self.factor * n
            return out if y is None else out + y

    return atom.support_torch_compile(Scaled)


@pytest.mark.spec("004.decorator.mark-dynamic")
def test_dynamic_dims_come_from_tensor_annotations():
    assert decorators._dynamic_dims_from_signature(_model_class().forward) == {"x": 0, "y": 0}


@pytest.mark.spec("004.levels.level-0-do-not-compile", "004.decision.enforce-eager-flag")
def test_levels_0_and_1_and_enforce_eager_call_forward_directly(eager_backend):
    cls = _model_class()
    for config in (_config(0), _config(1), atom.Config(enforce_eager=True, compilation_config=atom.CompilationConfig(level=3))):
        model = cls(atom_config=config)
        before = atom.COUNTERS.snapshot()
        assert torch.equal(model(torch.ones(2, 3)), torch.full((2, 3), 2.0))
        assert model.do_not_compile
        assert atom.COUNTERS.delta(before).num_dynamo_compiles == 0


def test_init_keeps_its_own_arguments_and_gets_atom_config_only_when_it_names_it(eager_backend):
    cls = _model_class()
    model = cls(3.0, atom_config=_config(0))
    assert model.factor == 3.0 and model.atom_config.compilation_config.level == 0

    class Named(torch.nn.Module):
        def __init__(self, atom_config):
            super().__init__()
            self.seen = atom_config

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    config = _config(0)
    assert atom.support_torch_compile(Named)(atom_config=config).seen is config


@pytest.mark.spec("004.decorator.dispatch-to-code")
def test_first_call_compiles_once_then_dispatches_without_guards(eager_backend, tmp_path):
    torch._dynamo.reset()
    model = _model_class()(atom_config=_config(2, tmp_path))
    before = atom.COUNTERS.snapshot()
    assert torch.equal(model(torch.ones(4, 3)), torch.full((4, 3), 2.0))
    assert torch.equal(model(torch.ones(7, 3)), torch.full((7, 3), 2.0)), "the batch dimension was not dynamic"
    model.factor = 5.0  # a guarded constant: plain torch.compile would recompile here
    assert torch.equal(model(torch.ones(2, 3)), torch.full((2, 3), 2.0))
    delta = atom.COUNTERS.delta(before)
    assert delta.num_dynamo_compiles == 1 and delta.num_guardless_dispatches == 2
    assert type(model).forward.__code__ is model.original_code_object
    dumped = sorted(p.name for p in (tmp_path / "rank_0").iterdir())
    assert dumped == ["decompiled_code_1.py"]


def test_the_original_forward_comes_back_after_an_exception(eager_backend):
    torch._dynamo.reset()
    model = _model_class()(atom_config=_config(2))
    model(torch.ones(4, 3))
    model.fail = True  # read at trace time only: the compiled code does not raise ...
    model(torch.ones(4, 3))
    with pytest.raises((TypeError, AttributeError)):
        model("not a tensor")  # ... but the compiled graph fails on an argument it cannot take
    assert type(model).forward.__code__ is model.original_code_object


@pytest.mark.spec("004.levels.level-2-inductor")
def test_level_backends():
    assert decorators.level_backend(_config(2)) == "inductor"
    assert isinstance(decorators.level_backend(_config(3, cudagraph_capture_sizes=[1])), atom.VllmBackend)
    assert callable(decorators.level_backend(_config(2, use_inductor=False)))
    with pytest.raises(ValueError, match="level 0"):
        decorators.level_backend(_config(0))
