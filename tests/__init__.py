"""Test suite (a regular package, so `tests.helpers` is never shadowed by an installed `tests`)."""
