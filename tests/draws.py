"""Random draws pinned to one end of their range, for checking each end of a jittered wait or Retry-After exactly
(the app draws from `shared.store.retries._RANDOM` unless a policy is given its own `rng`)."""

import random


class Lowest(random.Random):
    """Every draw at the bottom of its range: no jitter added."""

    def uniform(self, a: float, b: float) -> float:
        return a

    def randint(self, a: int, b: int) -> int:
        return a


class Highest(random.Random):
    """Every draw at the top of its range: the most jitter added."""

    def uniform(self, a: float, b: float) -> float:
        return b

    def randint(self, a: int, b: int) -> int:
        return b
