"""The exceptions the connector raises on purpose, each naming what the user must change.

They are plain ``ValueError`` / ``RuntimeError`` subclasses so that Spark shows their message as is
(Spark wraps a Python data-source error in its own exception but keeps the text), and so that tests
can match them without importing pyspark.
"""

from __future__ import annotations


class StromOptionError(ValueError):
    """A data-source option is unknown, missing, malformed or used in the wrong mode."""


class StromTopicError(ValueError):
    """A topic or partition named by the options does not exist on the cluster."""


class StromDataLossError(RuntimeError):
    """Offsets the query must read are gone (retention, re-created topic); failOnDataLoss=true."""


class StromWriteError(RuntimeError):
    """A row could not be written (no topic, wrong column type, broker refused the record)."""
