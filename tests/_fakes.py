"""Stand-ins shared by the tests."""


class Clock:
    """A fake perf_counter: each call of a timed function advances it by that function's cost."""

    def __init__(self):
        self.now = 0.0
        self.calls = []

    def __call__(self):
        return self.now

    def fn(self, name, cost):
        def f():
            self.calls.append(name)
            self.now += cost
        return f
