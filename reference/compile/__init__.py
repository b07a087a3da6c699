"""The compile stack: seams, lowering, compiler driver, runtime, scope, metadata, metrics, env."""
