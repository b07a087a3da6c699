"""The conformance suite for Neuron-style torch.compile backends (a pytest plugin)."""

from conformance.implementation import Implementation, NotSupported, load_implementation

__all__ = ["Implementation", "NotSupported", "load_implementation"]
