"""The recipe's ``runtime.egress`` section: the hosts a gateway-only sandbox may reach through the egress proxy."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from polar_cli.egress.policy import DEFAULT_PORTS, Allowlist, allowlist, parse_pattern


class EgressConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)

    allow: list[str] = Field(default_factory=list)
    """Hosts the session containers may reach through Polar's egress proxy: exact names (``pypi.org``) or
    ``*.suffix`` (any name below it). Empty (the default): no proxy, the sandbox reaches the gateway only. Needs
    ``runtime.network: gateway-only``; every attempt, allowed or refused, lands on the row (``egress``)."""
    ports: list[int] = Field(default_factory=lambda: list(DEFAULT_PORTS), min_length=1)
    """Ports the allowed hosts may be reached on."""
    private_addresses: bool = False
    """Let allowed names resolve to loopback, private, link-local or reserved addresses (an internal mirror); off,
    such a name gets 403, so an allowed name cannot lead to the host's own ports."""

    @field_validator("allow")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            parse_pattern(pattern)
        return value

    @field_validator("ports")
    @classmethod
    def _ports(cls, value: list[int]) -> list[int]:
        for port in value:
            if not 0 < port < 65536:
                raise ValueError(f"egress port {port}: not a TCP port")
        return value

    def allowlist(self) -> Allowlist | None:
        """The recipe's allowlist; None when it allows no host."""
        if not self.allow:
            return None
        return allowlist(self.allow, self.ports, private_addresses=self.private_addresses)
