"""The one error type a controller raises for a mistake the user can fix."""


class UserError(Exception):
    """Something the user did or must do first; the message says what to do. Shown, never logged as a crash."""
