"""Harbor task folders as Polar's input: loading, images, the verifier and the oracle (README.md)."""
