"""The conformance suite for Neuron-style torch.compile backends (a pytest plugin)."""

from conformance.harness.implementation import CAPABILITIES, Implementation, NotSupported, load_implementation

__all__ = ["CAPABILITIES", "Implementation", "NotSupported", "load_implementation"]
