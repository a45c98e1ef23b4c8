"""Exceptions of uniradix. Misuse raises ValueError/TypeError; broken internals InvariantError."""


class InvariantError(AssertionError):
    """A structural or accounting invariant does not hold: a bug, never a user error."""
