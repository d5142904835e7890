"""Recorder: the event store's only writer."""

from services.recorder.service import RecorderService

__all__ = ["RecorderService"]
