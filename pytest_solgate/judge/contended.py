"""Judge (a busy machine): how much of a contended run's slowdown its wait for a CPU can explain. Pure."""

from __future__ import annotations


def beyond_contention(change: float, wait: float | None) -> float | None:
    """The change had a contended run not waited for a CPU at all, or None when nothing bounds the
    wait. A thread that waited a share ``wait`` of its window ran the rest of it, so contention
    can have stretched its time by at most 1 / (1 - wait): its SOL undisturbed is at most
    SOL / (1 - wait). A drop still beyond the tolerance after that is not the machine's doing."""
    if wait is None or not 0 <= wait < 1:
        return None
    return (1 + change) / (1 - wait) - 1
