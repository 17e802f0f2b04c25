"""Corpus rows out as other formats: ATIF (Harbor's Agent Trajectory Interchange Format)."""

from polar_cli.export.atif import session_to_atif
from polar_cli.export.run import ExportResult, export_atif

__all__ = ["ExportResult", "export_atif", "session_to_atif"]
