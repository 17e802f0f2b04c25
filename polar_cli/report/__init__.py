"""The run, seen: a static HTML report of a run directory and a trajectory viewer per session (README.md)."""

from polar_cli.report.build import Built, build_report
from polar_cli.report.data import figures, find_session, iter_sessions, session_summary

__all__ = ["Built", "build_report", "figures", "find_session", "iter_sessions", "session_summary"]
