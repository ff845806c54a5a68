"""Test suite (a regular package, so `tests.support.helpers` is never shadowed by an installed `tests`)."""
