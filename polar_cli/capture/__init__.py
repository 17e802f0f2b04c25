"""Capture records: one per model call, stored compactly per session, rebuilt exactly by the readers."""

from polar_cli.capture.ids import PromptView
from polar_cli.capture.record import CaptureRecord
from polar_cli.capture.store import CaptureWriter, read_capture_dir, read_session, read_session_views

__all__ = ["CaptureRecord", "CaptureWriter", "PromptView", "read_capture_dir", "read_session", "read_session_views"]
