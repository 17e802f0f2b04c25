"""`polar generate`: recipes run through the node into a resumable, crash-safe corpus."""
