"""Long-running property tests of the executor (see stress/README.md)."""
