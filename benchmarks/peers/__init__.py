"""Peers Strom is measured against in the same run: Redis Streams and NATS JetStream.

Each peer module starts its server on 127.0.0.1 with a temp data dir and a free port, runs the
same workloads as Strom with its Python client in its fastest documented mode, and stops the
server. The servers come from Debian packages (`benchmarks/setup-peers`); a missing binary makes
the peer report itself as skipped rather than fail the run.
"""
