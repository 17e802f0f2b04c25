"""Rubric and judge rewards: a judge model scores a session's transcript against a rubric (docs/judge.md)."""
