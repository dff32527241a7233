"""The one error type the lab raises for conditions a user can act on."""


class LabError(Exception):
    """Something the user can fix; `hint` says how."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\n  hint: {self.hint}" if self.hint else base
