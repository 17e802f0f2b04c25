"""`polar images build base | harness NAME|all | instances MANIFEST`: Polar's own images, cached by content.

Image names come from POLAR_IMAGE_PREFIX (default "polar"); POLAR_BASE_IMAGE uses an image you supply as base.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import orjson
import typer

from polar_cli.commands.common import exit_codes
from polar_cli.errors import ConfigError

KINDS = ("base", "harness", "instances")


def _log(quiet: bool) -> Any:
    def log(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    return log


def _instance_rows(manifest: str, log: Any) -> list[dict[str, Any]]:
    from polar_cli.runtime.docker import DockerRuntime
    from polar_cli.swe.images import build_instance_images

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


def _harness_names(kind: str, target: str | None) -> list[str]:
    from polar_cli.harness import get_adapter
    from polar_cli.runtime.images import HARNESSES

    if kind == "base":
        if target:
            raise ConfigError(f"polar images build base takes no argument (got {target!r})")
        return []
    if not target:
        raise ConfigError(f"polar images build harness NAME: name one of {', '.join(HARNESSES)} or all")
    return list(HARNESSES) if target == "all" else [get_adapter(target).name]


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
    log = _log(quiet)
    with exit_codes():
        if action != "build":
            raise ConfigError(f"polar images {action}: unknown action; use: polar images build {'|'.join(KINDS)}")
        if kind not in KINDS:
            raise ConfigError(f"polar images build {kind}: unknown kind; use one of {', '.join(KINDS)}")
        if kind == "instances":
            if not target:
                raise ConfigError("polar images build instances MANIFEST: the manifest is missing")
            rows = _instance_rows(target, log)
        else:
            from polar_cli.runtime.docker import DockerRuntime, connect
            from polar_cli.runtime.images import build_bundles

            names = _harness_names(kind, target)
            with DockerRuntime(connect(timeout=3600)) as runtime:
                rows = build_bundles(runtime.client, names, log)
    if json_out:
        typer.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    for row in rows:
        state = "built" if row["built"] else "cached"
        typer.echo(f"{row['kind']:9} {row['image']}  {state} in {row['seconds']:.1f} s")
