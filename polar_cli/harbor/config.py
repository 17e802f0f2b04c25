"""A recipe's ``harbor`` section: the acceptance threshold and the FROM mapping table of Harbor task images.

Kept apart from `polar_cli.config` so that loading tasks needs no recipe (`polar validate DIR`, `polar serve`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Polar's bootstrapped Debian base (`runtime.images.ensure_base_image`), as a FROM mapping's target
BASE = "{base}"
# a FROM no registry here serves, mapped to Polar's registry-free base: the Debian release it is bootstrapped from.
# Real deployments replace the table (their own registry or mirror), or empty it to build every FROM as written.
DEFAULT_BASE_IMAGES: dict[str, str] = {
    "debian:bookworm": BASE,
    "debian:bookworm-slim": BASE,
    "debian:12": BASE,
    "debian:12-slim": BASE,
    "docker.io/library/debian:bookworm": BASE,
    "docker.io/library/debian:bookworm-slim": BASE,
}


class HarborConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)

    reward_threshold: float = 1.0
    """A Harbor task's session is accepted when its reward (the verifier's ``reward`` value, else the mean of its
    named values) is at least this."""
    base_images: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_BASE_IMAGES))
    """FROM mapping table: an image a task's environment/Dockerfile builds FROM (exactly, or a pattern with ``*``)
    -> the image built FROM instead; ``{base}`` is Polar's bootstrapped Debian base. Empty: every FROM as written."""
