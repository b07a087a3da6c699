"""Small functions whose outputs alias their inputs or each other, as eager PyTorch defines it.

The suite's FX-pass contract (``conformance/tests/test_fx_passes.py``) and the reference's unit
tests of its aliasing pass (``tests/fx_passes/test_fx_passes.py``) both compile these and compare storage
with eager; keeping one copy keeps the two sets of tests about the same graphs.
"""

from __future__ import annotations


def returns_mutated_input(x):
    """Adds one to ``x`` in place and returns it: the output IS the input."""
    y = x.add_(1)
    return y


def returns_view_taken_before_mutation(x):
    """A view of ``x`` taken before ``x`` is doubled in place: the view sees the write."""
    v = x.view(2, 3)
    x.mul_(2)
    return v, x.sum()


def outputs_alias_each_other(x):
    """Two outputs over one storage: ``v`` is a flat view of ``h``, written in place after."""
    h = x * 2
    v = h.view(-1)
    h.relu_()
    return h, v
