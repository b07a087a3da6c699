"""The suite's own models and scenarios, shared by the tests and the processes they start.

Small decoders for the ATOM contracts, the SPMD scenarios a rank runs, and the torchrun side of
those scenarios (:mod:`~conformance.models.spmd_world`). Above the harness and beside reporting (the
two do not import each other); they reach an implementation only through the adapter a run loads,
never import the tests, and build nothing at import.
"""
