"""The egress allowlist: named hosts a gateway-only sandbox may reach through Polar's logging proxy (README.md)."""

from polar_cli.egress.policy import Allowlist, allowlist, merged
from polar_cli.egress.proxy import EgressEntry, EgressLog, EgressProxy

__all__ = ["Allowlist", "EgressEntry", "EgressLog", "EgressProxy", "allowlist", "merged"]
