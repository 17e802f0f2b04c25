"""A session's token budget: the most tokens the model may sample over all of a session's calls (a trainer's bound
on one sample's response, as TRL's ``max_completion_length`` bounds a row).

- Rule 1: each call's ``max_tokens`` is lowered to what is left of the budget, so the budget is never overrun.
- Rule 2: once nothing is left, the gateway answers further calls as a context-length error in the harness's own API
  (error kind ``context_length``: Claude Code and Pi read it as "prompt is too long" and compact or stop; the others
  end the turn), recorded as a ``client_error`` of kind ``token_budget``, so the row can say why the session ended.
"""

from __future__ import annotations

from typing import Any

from polar_cli.gateway.sessions import Session

BUDGET_KIND = "token_budget"


def refusal(session: Session) -> str | None:
    """Why the session's next call is refused (Rule 2), or None."""
    budget = session.token_budget
    if budget is None or session.sampled < budget:
        return None
    return (
        f"maximum context length reached: this session's token budget of {budget} sampled tokens is used up "
        f"({session.sampled} sampled)"
    )


def limit(body: dict[str, Any], session: Session) -> None:
    """Lower the call's ``max_tokens`` to what is left of the budget (Rule 1)."""
    if session.token_budget is None:
        return
    left = max(1, session.token_budget - session.sampled)
    asked = body.get("max_tokens")
    if not isinstance(asked, int) or asked > left:
        body["max_tokens"] = left


def spend(session: Session, sampled: int) -> None:
    session.sampled += sampled
