"""Adapters for the implementations the suite knows about.

The only part of the suite that imports an implementation (the reference here; torch's own backends
and IREE-Turbine by their public API). Built on the harness's adapter protocol; used by the plugin
only through a spec string (``--conformance-impl package.module:factory``), and by the selfcheck and
the support documents by import.
"""
