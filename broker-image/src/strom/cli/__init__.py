"""The ``strom`` command: broker start, a local dev cluster, topic admin, console producer/consumer.

Each command family lives in its own module (``topic.py``, ``produce.py``, ...) that only parses
arguments and calls the client; everything that can be decided without a broker (formatting, key
splitting, time parsing, planning a local cluster) is a pure helper tested on its own.
"""
