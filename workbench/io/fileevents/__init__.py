"""What a process tree did to a model's files, recorded by the kernel as it happened (not sampled):
pages read by read calls, touched through mappings, only populated, or spliced elsewhere."""
from __future__ import annotations

from workbench.io.fileevents.recorder import EventsUnavailable, FileEventRecorder, FileEvents

__all__ = ["EventsUnavailable", "FileEventRecorder", "FileEvents"]
