"""Supervision of long-lived tasks: the pure restart policy and the asyncio glue around it."""

from strom.supervision.policy import Escalate, Restart, RestartPolicy, TaskHistory
from strom.supervision.tasks import (
    FAULT_ENV,
    InjectedFault,
    Supervisor,
    current,
    failed,
    spawn,
)

__all__ = ["FAULT_ENV", "Escalate", "InjectedFault", "Restart", "RestartPolicy", "Supervisor",
           "TaskHistory", "current", "failed", "spawn"]
