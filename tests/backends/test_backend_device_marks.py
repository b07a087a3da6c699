"""Device marks (:mod:`reference.backends.device`) live in a weak map keyed by tensor identity:
nothing is written on the caller's tensors, and a mark goes with its tensor."""

from __future__ import annotations

import gc
import weakref

import torch

from reference.backends import device


def test_to_device_marks_the_copy_and_writes_nothing_on_the_tensor():
    host = torch.ones(3)
    on_device = device.to_device(host)
    assert device.is_device_tensor(on_device) and not device.is_device_tensor(host)
    assert not [name for name in vars(on_device) if "neuron" in name], "an attribute was written on the tensor"
    assert not device.is_device_tensor(on_device.detach()), "a new tensor object is not marked"
    assert not device.is_device_tensor(torch.ones(3)) and not device.is_device_tensor("not a tensor")


def test_equal_values_do_not_share_a_mark_and_a_mark_goes_with_its_tensor():
    a = device.to_device(torch.zeros(2))
    b = torch.zeros(2)  # equal values, another tensor
    assert device.is_device_tensor(a) and not device.is_device_tensor(b)
    ref, marked = weakref.ref(a), len(device._DEVICE._marked)
    del a
    gc.collect()
    assert ref() is None, "the mark kept the tensor alive"
    assert len(device._DEVICE._marked) == marked - 1
