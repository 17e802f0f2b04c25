"""A harness from a recipe, without code: `custom_harnesses: {NAME: {...}}` made into a `HarnessAdapter`.

An entry gives the argv, environment and files of one headless run as templates, the API the harness speaks, and
what to mount (a Polar-built bundle, a prebuilt bundle image, or nothing: the command is in the instance image).
Templates take five placeholders: ``{gateway_url}`` (the gateway root, no trailing slash, no ``/v1``),
``{session_key}``, ``{model}``, ``{instruction}`` and ``{workdir}``.

Substitution is one pass over the template, so a value is never scanned again: an instruction holding ``{model}``,
quotes, ``$(...)`` or newlines arrives as written. Each argv element stays one element (no shell, no splitting), so
``"{instruction}"`` as an element is exactly the instruction, and ``"--prompt={instruction}"`` is one token too. Only
``{identifier}`` is a placeholder: other braces (JSON, ``f() { x; }``, ``{a,b}``) stay as they are, an unknown
identifier is an error (a typo never passes silently), and ``{{name}}`` writes a literal ``{name}`` (so a shell
script's ``${HOME}`` is written ``${{HOME}}``). Text is substituted as text: nothing is quoted or escaped for the
file's format, so give the instruction to a structured file's reader through argv, env or stdin instead.

The session key goes in ``env`` only (never argv or files), as for every built-in harness: argv is visible to every
process in the container, and files outlive the run in the artifacts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from polar_cli.harness.base import BundleRef, HarnessAdapter, Launch, Wiring, base_env
from polar_cli.translate.codec import ApiName

CustomApi = Literal["anthropic", "openai-chat", "openai-responses", "google"]
API_NAMES: dict[str, ApiName] = {
    "anthropic": "anthropic_messages",
    "openai-chat": "openai_chat",
    "openai-responses": "openai_responses",
    "google": "google_genai",
}
PLACEHOLDERS = ("gateway_url", "session_key", "model", "instruction", "workdir")
# where each may appear: the key only in the environment, paths only know the workdir
IN_ENV = PLACEHOLDERS
IN_TEXT = tuple(p for p in PLACEHOLDERS if p != "session_key")
IN_PATH = ("workdir",)
_TOKEN = re.compile(r"\{\{([A-Za-z_]\w*)\}\}|\{([A-Za-z_]\w*)\}")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def substitute(template: str, values: Mapping[str, str]) -> str:
    """``{name}`` -> ``values[name]``, ``{{name}}`` -> ``{name}``, in one pass: substituted text is never re-read."""

    def replace(match: re.Match[str]) -> str:
        if match[1] is not None:
            return "{" + match[1] + "}"
        return values[match[2]]

    return _TOKEN.sub(replace, template)


def check_template(template: str, where: str, allowed: tuple[str, ...]) -> None:
    """ValueError naming ``where`` for a placeholder that is unknown, or not allowed there."""
    for match in _TOKEN.finditer(template):
        name = match[2]
        if name is None or name in allowed:
            continue
        if name == "session_key":
            raise ValueError(
                f"{where}: {{session_key}} may only appear in env (put it in a variable the harness reads)"
            )
        hint = f"known here: {', '.join('{' + p + '}' for p in allowed)}; write {{{{{name}}}}} for a literal {{{name}}}"
        raise ValueError(f"{where}: unknown placeholder {{{name}}} ({hint})")


def _absolute(path: str, where: str) -> str:
    if not (path.startswith("/") or path.startswith("{workdir}")):
        raise ValueError(f"{where}: not an absolute path ({path!r}; start it with / or {{workdir}})")
    return path


class CustomHarnessConfig(BaseModel):
    """One harness defined in a recipe (`custom_harnesses.NAME`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)

    api: CustomApi
    """The API the harness speaks to the gateway: anthropic | openai-chat | openai-responses | google."""
    argv: list[str] = Field(min_length=1)
    """The command, one element per argument (no shell); placeholders in every element but {session_key}."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment added to HOME=/root, NO_COLOR and NO_PROXY; values take every placeholder."""
    files: dict[str, str] = Field(default_factory=dict)
    """Absolute path (or {workdir}/...) -> content, written (mode 600) before the run; contents take placeholders."""
    stdin: str | None = None
    """Fed to the harness on stdin (None: empty); takes placeholders but {session_key}."""
    bundle: str | None = None
    """What to mount: a built-in harness's name (its Polar-built bundle), a prebuilt bundle image (it must declare a
    VOLUME holding the files), or none / null: the command is in the instance image."""
    shell_tool: str = "bash"
    """The tool the harness runs shell commands with (what the gold engine calls)."""
    artifacts: list[str] = Field(default_factory=list)
    """Absolute paths copied out after the run (the harness's own logs and transcripts)."""
    droppings: list[str] = Field(default_factory=list)
    """Git pathspecs, relative to the workdir, the harness writes itself: kept out of the patch."""
    workdir: str | None = None
    """Where the command runs (None: the session's workdir, the repository); takes {workdir}."""
    model: str = "polar-model"
    """The name {model} stands for when the run names none (the gateway serves its own model anyway)."""

    @field_validator("argv")
    @classmethod
    def _argv(cls, argv: list[str]) -> list[str]:
        if not argv[0]:
            raise ValueError("[0]: the command is empty")
        for i, element in enumerate(argv):
            check_template(element, f"[{i}]", IN_TEXT)
        return argv

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for key, value in env.items():
            if not _ENV_NAME.fullmatch(key):
                raise ValueError(f"{key!r}: not an environment variable name")
            check_template(value, key, IN_ENV)
        return env

    @field_validator("files")
    @classmethod
    def _files(cls, files: dict[str, str]) -> dict[str, str]:
        for path, content in files.items():
            check_template(path, f"{path!r} (path)", IN_PATH)
            _absolute(path, repr(path))
            check_template(content, repr(path), IN_TEXT)
        return files

    @field_validator("stdin")
    @classmethod
    def _stdin(cls, stdin: str | None) -> str | None:
        if stdin is not None:
            check_template(stdin, "stdin", IN_TEXT)
        return stdin

    @field_validator("artifacts")
    @classmethod
    def _artifacts(cls, paths: list[str]) -> list[str]:
        for i, path in enumerate(paths):
            check_template(path, f"[{i}]", ())
            _absolute(path, f"[{i}]")
        return paths

    @field_validator("droppings")
    @classmethod
    def _droppings(cls, specs: list[str]) -> list[str]:
        for i, spec in enumerate(specs):
            if not spec or spec.startswith("/") or ".." in PurePosixPath(spec).parts:
                raise ValueError(f"[{i}]: {spec!r} must be a path inside the workdir, relative to it")
        return specs

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, workdir: str | None) -> str | None:
        if workdir is not None:
            check_template(workdir, "workdir", IN_PATH)
            _absolute(workdir, "workdir")
        return workdir

    @field_validator("bundle")
    @classmethod
    def _bundle(cls, bundle: str | None) -> str | None:
        if bundle is not None and (not bundle.strip() or any(c.isspace() for c in bundle)):
            raise ValueError(f"{bundle!r}: not a harness name or an image name")
        return None if bundle in (None, "none") else bundle

    def bundle_ref(self) -> BundleRef:
        from polar_cli.harness import ADAPTERS, ALIASES

        if self.bundle is None:
            return BundleRef("none")
        name = ALIASES.get(self.bundle, self.bundle)
        return BundleRef("harness", name) if name in ADAPTERS else BundleRef("image", self.bundle)


def custom_adapter(name: str, config: CustomHarnessConfig) -> HarnessAdapter:
    """The adapter of one recipe-defined harness: `launch` renders its templates for one session."""

    def build(instruction: str, wiring: Wiring, workdir: str) -> Launch:
        values = {
            "gateway_url": wiring.gateway_url.rstrip("/"),
            "session_key": wiring.session_key,
            "model": wiring.model or config.model,
            "instruction": instruction,
            "workdir": workdir,
        }
        return Launch(
            argv=tuple(substitute(a, values) for a in config.argv),
            env={**base_env(wiring), **{k: substitute(v, values) for k, v in config.env.items()}},
            files={substitute(p, values): substitute(c, values).encode() for p, c in config.files.items()},
            workdir=substitute(config.workdir, values) if config.workdir else workdir,
            artifacts=tuple(config.artifacts),
            droppings=tuple(config.droppings),
            stdin=substitute(config.stdin, values).encode() if config.stdin is not None else None,
        )

    return HarnessAdapter(
        name=name,
        package="",
        shell_tool=config.shell_tool,
        build=build,
        api=API_NAMES[config.api],
        bundle_ref=config.bundle_ref(),
    )


def check_custom_names(custom: Mapping[str, CustomHarnessConfig]) -> None:
    """ValueError for a custom harness name that is malformed or taken by a built-in harness (or its alias)."""
    from polar_cli.harness import ADAPTERS, ALIASES

    for name in custom:
        if not _NAME.fullmatch(name):
            raise ValueError(f"{name!r}: a harness name is lowercase letters, digits, '.', '_' and '-'")
        if name in ADAPTERS or name in ALIASES:
            raise ValueError(f"{name!r}: a built-in harness has this name; give yours another")


def resolve_adapter(name: str, custom: Mapping[str, CustomHarnessConfig]) -> HarnessAdapter:
    """A recipe's harness by name: its own custom entry, else a built-in harness (ConfigError naming all)."""
    from polar_cli.errors import ConfigError
    from polar_cli.harness import ADAPTERS, get_adapter

    if name in custom:
        return custom_adapter(name, custom[name])
    try:
        return get_adapter(name)
    except ConfigError:
        known = [*ADAPTERS, *custom]
        raise ConfigError(f"unknown harness {name!r}; known: {', '.join(known)}") from None


def load_harness_config(path: str) -> dict[str, CustomHarnessConfig]:
    """``--harness-config FILE``: YAML mapping each name to a harness, or a recipe (then its ``custom_harnesses``)."""
    from pathlib import Path

    import yaml
    from pydantic import TypeAdapter, ValidationError

    from polar_cli.errors import ConfigError
    from polar_cli.overrides import errors_text

    source = f"harness config {path}"
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{source}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if isinstance(data, dict) and "custom_harnesses" in data:
        data = data["custom_harnesses"]
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{source}: expected a mapping of harness names to harnesses (argv, api, ...)")
    try:
        harnesses = TypeAdapter(dict[str, CustomHarnessConfig]).validate_python(data)
        check_custom_names(harnesses)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {errors_text(exc)}") from exc
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    return harnesses
