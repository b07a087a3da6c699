"""The suite's own models and scenarios, shared by the tests and the child processes they start.

Small decoders for the ATOM contracts and the SPMD scenarios a rank runs. They reach an
implementation only through the adapter (the harness), never import the tests, and build nothing at
import.
"""
