"""The wire protocol: generated gRPC stubs (``v1``) and pure codecs.

Nothing in this package does I/O (checked by an import-linter contract), so every codec can be
tested with bytes in and values out.
"""
