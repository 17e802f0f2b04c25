"""The `polar` commands: one module per command, registered by `polar_cli.cli` from `COMMANDS`.

A command parses its arguments, calls the package that does the work, and prints; the mapping of Polar's error tree
to exit codes and the one ``error:`` line live in `common`. Heavy dependencies (pyarrow, docker, transformers) are
imported inside the functions that use them, so `polar --help` and `polar proxy` start fast.
"""

# (command name, module under polar_cli.commands); the module defines a function of the command's name
COMMANDS: tuple[tuple[str, str], ...] = (
    ("generate", "generate"),
    ("evaluate", "evaluate"),
    ("validate", "validate"),
    ("run", "run"),
    ("images", "images"),
    ("harnesses", "harnesses"),
    ("doctor", "doctor"),
    ("proxy", "proxy"),
    ("merge-traces", "merge_traces"),
    ("export", "export"),
    ("report", "report"),
    ("view", "report"),
    ("serve", "serve"),
    ("submit", "submit"),
    ("status", "submit"),
)
