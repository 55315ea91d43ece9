"""User-facing errors: one line that says what is wrong and how to fix it (docs/architecture.md)."""


class UserError(Exception):
    """Bad input from the user (a path, an id, a config, a store).

    The CLI prints ``error: <what>  (fix: <how>)`` on one line and exits with code 2; it never
    shows a traceback for these, and the code raising it must not have changed anything on disk.
    """

    def __init__(self, what: str, fix: str = ""):
        super().__init__(what)
        self.what = what
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.what} (fix: {self.fix})" if self.fix else self.what
