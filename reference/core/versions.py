"""The version of this reference implementation (one of the tool versions an artifact records)."""

__version__ = "0.1.0"
