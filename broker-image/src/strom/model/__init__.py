"""Facts every layer shares, written once: pure functions and tables with no I/O and no imports
from the rest of Strom (an import-linter contract), so the client, the broker, the CLI and the
operator can all derive from them: the consumer-lag definition (``lag``) and the reassignment
planner (``reassign``)."""
