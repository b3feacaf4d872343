"""Strom: a distributed, partitioned, replicated commit log (the Apache Kafka model) in Python."""

__version__ = "0.1.0"
