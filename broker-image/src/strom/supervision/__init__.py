"""Supervision of long-lived tasks: the pure restart policy and the asyncio glue around it."""

from strom.supervision.policy import Escalate, Restart, RestartPolicy, TaskHistory
from strom.supervision.tasks import (
    FAULT_ENV,
    FatalError,
    InjectedFault,
    Supervisor,
    current,
    failed,
    spawn,
)

__all__ = ["FAULT_ENV", "Escalate", "FatalError", "InjectedFault", "Restart", "RestartPolicy",
           "Supervisor", "TaskHistory", "current", "failed", "spawn"]
