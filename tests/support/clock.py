"""A deterministic clock for code that takes ``clock=`` and ``sleep=`` (the pacer, the lifecycle)."""


class Clock:
    """Time stands still until a test (or ``sleep``) moves it."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s
