"""Recipes and their sections: what `polar generate` runs, as validated pydantic models loaded from YAML and
overridden with ``a.b=value`` (`config.recipe`); the engine section (`config.engine`), the cluster section
(`config.cluster`) and `SessionsConfig`, the sections a recipe and serve.yaml share. Every section refuses unknown
keys (`config.base.Strict`).

This package is the one home of the recipe's schema: the stages below it read their settings from these models, and
nothing here imports a stage that runs them.
"""

from polar_cli.config.base import Strict
from polar_cli.config.cluster import ClusterConfig
from polar_cli.config.engine import EngineConfig, EngineKind, SGLangConfig
from polar_cli.config.recipe import (
    BuilderConfig,
    ConcurrencyConfig,
    EvalConfig,
    ManifestConfig,
    MetricsConfig,
    OutputConfig,
    Recipe,
    RuntimeConfig,
    SessionsConfig,
    TimeoutsConfig,
    apply_override,
    load_recipe,
    parse_recipe,
    recipe_yaml,
    resolve_paths,
)

__all__ = [
    "BuilderConfig",
    "ClusterConfig",
    "ConcurrencyConfig",
    "EngineConfig",
    "EngineKind",
    "EvalConfig",
    "ManifestConfig",
    "MetricsConfig",
    "OutputConfig",
    "Recipe",
    "RuntimeConfig",
    "SGLangConfig",
    "SessionsConfig",
    "Strict",
    "TimeoutsConfig",
    "apply_override",
    "load_recipe",
    "parse_recipe",
    "recipe_yaml",
    "resolve_paths",
]
