"""Reading the host's apt sources for a Debian mirror, and the base recipe's digest."""

from __future__ import annotations

from pathlib import Path

import pytest

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.bootstrap import (
    AptSource,
    BaseRecipe,
    debian_mirror,
    host_apt_sources,
    parse_deb822_sources,
    parse_one_line_sources,
    pick_debian_mirror,
)

DEB822 = """\
Types: deb
# a comment line
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm
Components: main

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: bookworm
Components: main
"""


def test_deb822_stanzas() -> None:
    assert parse_deb822_sources(DEB822) == [
        AptSource("http://mirror.example/debian", ("bookworm", "bookworm-updates"), ("main",)),
        AptSource("http://mirror.example/debian-security", ("bookworm-security",), ("main",)),
    ]


def test_one_line_sources_with_options_and_comments() -> None:
    text = (
        "# deb http://commented.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://a.example/debian bookworm main contrib # trailing\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb http://b.example/ubuntu jammy universe\n"
    )
    assert parse_one_line_sources(text) == [
        AptSource("http://a.example/debian", ("bookworm",), ("main", "contrib")),
        AptSource("http://b.example/ubuntu", ("jammy",), ("universe",)),
    ]


def test_mirror_prefers_a_source_listing_the_suite() -> None:
    sources = [
        AptSource("https://deb.nodesource.example/node_20.x", ("nodistro",), ("main",)),
        AptSource("http://other.example/debian", ("trixie",), ("main",)),
        AptSource("http://mirror.example/debian", ("bookworm",), ("main",)),
    ]
    assert pick_debian_mirror(sources, "bookworm") == "http://mirror.example/debian"


def test_mirror_falls_back_to_another_release_of_a_debian_archive() -> None:
    sources = [
        AptSource("http://mirror.example/debian-security", ("trixie-security",), ("main",)),
        AptSource("https://deb.nodesource.example/node_20.x", ("nodistro",), ("main",)),
        AptSource("http://mirror.example/debian", ("trixie", "trixie-updates"), ("main",)),
    ]
    assert pick_debian_mirror(sources, "bookworm") == "http://mirror.example/debian"


def test_no_mirror_when_nothing_looks_like_debian() -> None:
    sources = [AptSource("http://b.example/ubuntu", ("jammy",), ("main",))]
    assert pick_debian_mirror(sources, "bookworm") is None


def test_host_sources_read_both_formats_and_skip_other_files(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://one.example/debian bookworm main\n")
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "debian.sources").write_text(DEB822)
    (parts / "old.list.disabled").write_text("deb http://disabled.example/debian bookworm main\n")
    uris = [s.uri for s in host_apt_sources((tmp_path / "sources.list", parts))]
    assert uris == [
        "http://one.example/debian",
        "http://mirror.example/debian",
        "http://mirror.example/debian-security",
    ]


def test_mirror_override_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLAR_DEBIAN_MIRROR", "http://override.example/debian")
    assert debian_mirror("bookworm") == "http://override.example/debian"


def test_missing_mirror_says_how_to_set_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POLAR_DEBIAN_MIRROR", raising=False)
    monkeypatch.setattr("polar_cli.runtime.bootstrap.host_apt_sources", lambda: [])
    with pytest.raises(RuntimeFailure, match="POLAR_DEBIAN_MIRROR"):
        debian_mirror("bookworm")


def test_recipe_digest_is_stable_and_follows_every_field() -> None:
    recipe = BaseRecipe()
    assert recipe.digest() == BaseRecipe().digest()
    assert len(recipe.digest()) == 12
    changed = [
        BaseRecipe(suite="trixie"),
        BaseRecipe(variant="buildd"),
        BaseRecipe(packages=(*recipe.packages, "curl")),
        BaseRecipe(changes=()),
        BaseRecipe(steps_version=recipe.steps_version + 1),
    ]
    assert len({recipe.digest(), *(r.digest() for r in changed)}) == 1 + len(changed)
