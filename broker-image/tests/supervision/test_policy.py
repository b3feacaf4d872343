"""The restart policy: restartable tasks back off and restart until they fail too often in a
window; critical tasks escalate at once."""

from __future__ import annotations

from strom.supervision import Escalate, Restart, RestartPolicy, TaskHistory


def test_restartable_task_backs_off_then_escalates() -> None:
    policy = RestartPolicy(max_failures=4, window_s=60, initial_backoff_s=0.1, max_backoff_s=0.3)
    history = TaskHistory()
    assert policy.decide(history, 0.0, restartable=True) == Restart(0.1)
    assert policy.decide(history, 1.0, restartable=True) == Restart(0.2)
    assert policy.decide(history, 2.0, restartable=True) == Restart(0.3)  # capped
    decision = policy.decide(history, 3.0, restartable=True)
    assert isinstance(decision, Escalate) and "4 times within 60s" in decision.reason


def test_old_failures_leave_the_window() -> None:
    policy = RestartPolicy(max_failures=2, window_s=10)
    history = TaskHistory()
    assert isinstance(policy.decide(history, 0.0, restartable=True), Restart)
    assert isinstance(policy.decide(history, 11.0, restartable=True), Restart)
    assert isinstance(policy.decide(history, 12.0, restartable=True), Escalate)


def test_critical_task_escalates_at_once() -> None:
    decision = RestartPolicy().decide(TaskHistory(), 0.0, restartable=False)
    assert isinstance(decision, Escalate)
