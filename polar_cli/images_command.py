"""`polar images build base | harness NAME|all | instances MANIFEST`: Polar's own images, cached by content."""

from __future__ import annotations

import sys
import time
from typing import Annotated, Any

import orjson
import typer

from polar_cli.errors import ConfigError, PolarError

KINDS = ("base", "harness", "instances")


def _log(quiet: bool) -> Any:
    def log(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    return log


def build_harnesses(client: Any, names: list[str], log: Any) -> list[dict[str, Any]]:
    """Build the bundle images (and base and node below them) and their data containers; one result row each."""
    from polar_cli.runtime.images import (
        ensure_base_image,
        ensure_bundle_container,
        ensure_harness_image,
        ensure_node_image,
        remove_stale_bundle_containers,
        remove_superseded_images,
    )

    rows = []
    for label, result in (("base", ensure_base_image(client, log=log)), ("node", ensure_node_image(client, log=log))):
        rows.append({"kind": label, "image": result.image, "built": result.built, "seconds": round(result.seconds, 2)})
    for name in names:
        result = ensure_harness_image(client, name, log=log)
        start = time.monotonic()
        container = ensure_bundle_container(client, result.image)
        remove_stale_bundle_containers(client, name, keep=container)
        superseded = remove_superseded_images(client, result.image) if result.built else []
        rows.append(
            {
                "kind": "harness",
                "name": name,
                "image": result.image,
                "built": result.built,
                "seconds": round(result.seconds, 2),
                "bundle_container": container,
                "bundle_container_seconds": round(time.monotonic() - start, 2),
                "removed": superseded,
            }
        )
    return rows


def build_instances(manifest: str, log: Any) -> list[dict[str, Any]]:
    try:
        from polar_cli.swe.images import build_instance_images
    except ImportError as exc:
        raise ConfigError(
            "polar images build instances: polar_cli.swe.images.build_instance_images is not part of this build"
        ) from exc
    from polar_cli.runtime.docker import DockerRuntime

    with DockerRuntime() as runtime:
        results = build_instance_images(manifest, runtime, log=log)
    return [
        {
            "kind": "instance",
            "image": r.image,
            "built_tag": r.built_tag,
            "built": r.built,
            "seconds": round(r.seconds, 2),
            "instances": list(r.instances),
        }
        for r in results
    ]


def images(
    action: Annotated[str, typer.Argument(help="build")],
    kind: Annotated[str, typer.Argument(help="base | harness | instances")],
    target: Annotated[str | None, typer.Argument(help="harness NAME (or all) | instances MANIFEST")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No build log on stderr")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON")] = False,
) -> None:
    """Build Polar's images without a registry: base (debootstrap), harness bundles, instance images; cached by content.

    Image names come from POLAR_IMAGE_PREFIX (default "polar"); POLAR_BASE_IMAGE uses an image you supply as base.
    """
    from polar_cli.runtime.base import RuntimeFailure
    from polar_cli.runtime.images import HARNESSES

    log = _log(quiet)
    try:
        if action != "build":
            raise ConfigError(f"polar images {action}: unknown action; use: polar images build {'|'.join(KINDS)}")
        if kind not in KINDS:
            raise ConfigError(f"polar images build {kind}: unknown kind; use one of {', '.join(KINDS)}")
        if kind == "instances":
            if not target:
                raise ConfigError("polar images build instances MANIFEST: the manifest is missing")
            rows = build_instances(target, log)
        else:
            from polar_cli.harness import get_adapter
            from polar_cli.runtime.docker import connect

            names: list[str] = []
            if kind == "harness":
                if not target:
                    raise ConfigError(f"polar images build harness NAME: name one of {', '.join(HARNESSES)} or all")
                names = list(HARNESSES) if target == "all" else [get_adapter(target).name]
            elif target:
                raise ConfigError(f"polar images build base takes no argument (got {target!r})")
            client = connect(timeout=3600)
            rows = build_harnesses(client, names, log) if names else _base_only(client, log)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (RuntimeFailure, PolarError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    if json_out:
        typer.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    for row in rows:
        state = "built" if row["built"] else "cached"
        typer.echo(f"{row['kind']:9} {row['image']}  {state} in {row['seconds']:.1f} s")


def _base_only(client: Any, log: Any) -> list[dict[str, Any]]:
    from polar_cli.runtime.images import ensure_base_image

    result = ensure_base_image(client, log=log)
    return [{"kind": "base", "image": result.image, "built": result.built, "seconds": round(result.seconds, 2)}]
