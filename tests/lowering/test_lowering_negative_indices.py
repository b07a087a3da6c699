"""Negative index tensors count from the end in torch; StableHLO's gather clamps them and its
scatter drops them, so the lowering rewrites them first (``wrap_negative_indices``). Each case is
compiled for real with the reference backend and compared with eager; a sliding-window KV cache
write (``cache[:, :, -1] = v``) is the case that found it (Mistral's decode step)."""

from __future__ import annotations

import pytest
import torch

from reference.lowering.stablehlo import wrap_negative_indices

aten = torch.ops.aten


def _read_last_and_first(x):
    return x[:, torch.tensor([-1, 0])]


def _write_last(x, v):
    y = x.clone()
    y[:, :, torch.tensor([-1])] = v
    return y


def _accumulate_mixed(x, v):
    return x.index_put((torch.tensor([-1, 1, -3]),), v, accumulate=True)


def _two_index_dims(x):
    return x[torch.tensor([-1, 0]), torch.tensor([-2, 1])]


def _mask_and_positive(x):
    return x[x > 0], x[:, torch.tensor([2, 1])]


CASES = {
    "read": (_read_last_and_first, lambda: (torch.randn(3, 4),)),
    "write": (_write_last, lambda: (torch.randn(1, 2, 4, 3), torch.randn(1, 2, 1, 3))),
    "accumulate": (_accumulate_mixed, lambda: (torch.randn(5, 2), torch.randn(3, 2))),
    "two_dims": (_two_index_dims, lambda: (torch.randn(3, 4),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_negative_indices_compile_to_eagers_result(name):
    fn, make = CASES[name]
    args = make()
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron")(*args)
    torch.testing.assert_close(got, fn(*args), rtol=1e-6, atol=1e-6)


def test_the_rewrite_touches_integer_indices_only_and_keeps_eager_values():
    from torch._dynamo.backends.common import aot_autograd

    seen = []

    def capture(gm, example_inputs):
        def run(*args):
            seen.append((gm, [a.clone() for a in args]))
            return gm(*args)

        return run

    x = torch.randn(3, 4)
    torch._dynamo.reset()
    torch.compile(lambda t: (t[:, torch.tensor([-1, 0])], t[t > 0]), backend=aot_autograd(fw_compiler=capture))(x)
    (gm, inputs), = seen
    want = gm(*inputs)
    assert wrap_negative_indices(gm)
    wheres = gm.graph.find_nodes(op="call_function", target=aten.where.self)
    assert len(wheres) == 1, "one integer index tensor, one rewrite; the boolean mask is left alone"
    for w, g in zip(want, gm(*inputs)):
        torch.testing.assert_close(g, w)
    # a graph lowered again (the same graph through two tools) is not rewritten twice
    assert not wrap_negative_indices(gm)
    assert len(gm.graph.find_nodes(op="call_function", target=aten.where.self)) == 1
