"""The in-process broker core fixtures of the broker tests, for the hostile-input tests."""

from ..broker.conftest import core, make_core  # noqa: F401  (fixtures)
