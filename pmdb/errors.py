"""The one error type a user sees: the CLI prints its message on one line and exits with code 2."""


class PmdbError(Exception):
    """A user-facing error (bad input, missing workspace, locked store, unknown platform, ...)."""

    exit_code = 2
