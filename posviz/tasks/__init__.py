"""Algorithmic tasks for length generalisation (Kazemnejad et al., NeurIPS 2023, in miniature): seeded generators,
their own symbol vocabulary, and a content hash of every generated split.

* :mod:`posviz.tasks.generators`: copy, reverse, addition, parity, sorting, and SCAN (:mod:`posviz.tasks.scan`);
  each makes examples ``(question, answer)`` of a given length, the task's own length (items to copy, digits to
  add, actions of the SCAN command), not a window of tokens.
* :mod:`posviz.tasks.data`: a split (task, lengths, count, seed) made reproducibly, with its SHA-256, and the
  vocabulary that turns examples into token ids.
"""

from __future__ import annotations

from posviz.tasks.data import TaskSplit, make_split, task_lengths, task_positions, task_vocabulary
from posviz.tasks.generators import TASKS, Task, get_task

__all__ = ["TASKS", "Task", "TaskSplit", "get_task", "make_split", "task_lengths", "task_positions", "task_vocabulary"]
