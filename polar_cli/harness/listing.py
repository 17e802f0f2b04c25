"""`polar harnesses`: every harness Polar can run, with its pin, API, bundle image and whether that image is built.

The rows are computed from the adapters alone (`harness_rows`); whether a bundle image is present is asked of the
engine through one callable, so a machine without Docker still gets the whole listing, with the state "no engine".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from polar_cli.errors import PolarError
from polar_cli.harness.base import HarnessAdapter
from polar_cli.harness.custom import API_NAMES

# built: the bundle image is in the engine; missing: it is not (`polar images build harness NAME`); none: nothing
# is mounted (the command is in the instance image); no engine: no Docker engine answered; unknown: no image name
State = Literal["built", "missing", "none", "no engine", "unknown"]
# image name -> present?; None when no engine answers
ImageCheck = Callable[[str], bool] | None
# Polar's API names as a recipe spells them
API_LABELS = {api: label for label, api in API_NAMES.items()}


@dataclass(frozen=True, slots=True)
class HarnessRow:
    name: str
    kind: Literal["built-in", "custom"]
    # the pinned version (harness_images/<name>/package.json); None for a custom harness or a bundle without a pin
    version: str | None
    # anthropic | openai-chat | openai-responses | google; None: the adapter declares none
    api: str | None
    # the image a session mounts; None when nothing is mounted or no image name could be made
    bundle: str | None
    state: State
    quirks: tuple[str, ...]
    # why version or bundle is unknown
    note: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "version": self.version,
            "api": self.api,
            "bundle": self.bundle,
            "state": self.state,
            "quirks": list(self.quirks),
            "note": self.note,
        }


def _own_bundle(name: str) -> tuple[str | None, str | None, str | None]:
    """(version, bundle image, note) of a Polar-built bundle, as the current build inputs name it."""
    from polar_cli.runtime.images import harness_image_plan, harness_version

    try:
        return harness_version(name), harness_image_plan(name).tag, None
    except (PolarError, OSError, ValueError) as exc:
        return None, None, str(exc)


def harness_row(adapter: HarnessAdapter, custom: bool, has_image: ImageCheck) -> HarnessRow:
    """One harness's row; ``has_image`` answers for its bundle image (None: no engine)."""
    ref = adapter.bundle_ref
    version, note = None, None
    if ref is None:
        version, image, note = _own_bundle(adapter.name)
    elif ref.kind == "harness":
        _, image, note = _own_bundle(ref.name)
    else:
        image = ref.name if ref.kind == "image" else None
    state: State
    if ref is not None and ref.kind == "none":
        state = "none"
    elif image is None:
        state = "unknown"
    elif has_image is None:
        state = "no engine"
    else:
        state = "built" if has_image(image) else "missing"
    api = API_LABELS.get(adapter.api) if adapter.api else None
    kind: Literal["built-in", "custom"] = "custom" if custom else "built-in"
    return HarnessRow(adapter.name, kind, version, api, image, state, adapter.quirks, note)


def harness_rows(
    builtin: Iterable[HarnessAdapter], custom: Iterable[HarnessAdapter], has_image: ImageCheck
) -> list[HarnessRow]:
    return [harness_row(a, False, has_image) for a in builtin] + [harness_row(a, True, has_image) for a in custom]


def engine_image_check(timeout: float = 5.0) -> ImageCheck:
    """``image -> present`` against the local Docker engine; None when no engine answers (never raises for that)."""
    from polar_cli.runtime.docker import connect
    from polar_cli.runtime.images import image_exists

    try:
        client = connect(timeout=timeout)
    except PolarError:
        return None
    return lambda image: image_exists(client, image)
