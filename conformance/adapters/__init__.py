"""Adapters for the implementations the suite knows about."""
