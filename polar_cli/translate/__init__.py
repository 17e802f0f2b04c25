"""Provider APIs <-> the typed internal representation (pure functions)."""
