"""Trace generators and converters for the hit-rate suite (`benchmarks/traces/suite.py`)."""
