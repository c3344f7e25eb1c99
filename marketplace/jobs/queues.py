"""The queues of this deployment: one explicit list.

A capability that needs background work adds its :class:`QueueSpec` here (the verifier and
e-mail delivery queues will); the frontend starts ``worker_count`` worker actors for each.
Tests build their own :class:`JobRegistry` and never add to this one.
"""

from __future__ import annotations

from marketplace.jobs.registry import JobRegistry, QueueSpec

QUEUES: tuple[QueueSpec, ...] = ()


def production_registry() -> JobRegistry:
    return JobRegistry(QUEUES)
