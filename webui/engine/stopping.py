"""Stop strings that are never streamed half-way.

Text arrives in deltas. Whatever could still turn out to be the start of a
stop string is held back until it is decided; everything else is emitted at
once. When a stop string appears, the text before it is emitted and the rest,
the stop string included, is dropped.

Which stop wins: the occurrence that is *completed* first in the stream (the one
that ends earliest; on a tie, the longer one, which starts earlier). This is
what stops generation as soon as possible, and it gives the same result however
the text is split into deltas. When no stop string contains another one, this
is simply the earliest occurrence.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopStringMatcher:
    """Filters a stream of text deltas, cutting it at the first stop string.

    >>> m = StopStringMatcher(["\\nUser:"])
    >>> m.feed("Hi!\\nUs")
    ('Hi!', False)
    >>> m.feed("er: more")
    ('', True)
    >>> m.matched
    '\\nUser:'
    """

    def __init__(self, stops: Sequence[str]) -> None:
        if isinstance(stops, str):
            raise TypeError(
                f"stops must be a sequence of strings, not a string: {stops!r}"
            )
        for stop in stops:
            if not isinstance(stop, str):
                raise TypeError(
                    f"stop strings must be str, got {type(stop).__name__}: {stop!r}"
                )
            if not stop:
                raise ValueError("stop strings must not be empty, got ''")
        self._stops: tuple[str, ...] = tuple(dict.fromkeys(stops))
        # Proper prefixes of any stop: the only suffixes worth holding back.
        self._prefixes: frozenset[str] = frozenset(
            stop[:k] for stop in self._stops for k in range(1, len(stop))
        )
        self._max_hold = max((len(stop) for stop in self._stops), default=1) - 1
        self._held = ""
        self._matched: str | None = None
        self._finished = False

    @property
    def stops(self) -> tuple[str, ...]:
        """The stop strings, in the given order, without duplicates."""
        return self._stops

    @property
    def matched(self) -> str | None:
        """The stop string that ended the text, or None if none has (yet)."""
        return self._matched

    @property
    def stopped(self) -> bool:
        """Whether a stop string has been found."""
        return self._matched is not None

    def feed(self, text_delta: str) -> tuple[str, bool]:
        """Add a delta; return (text safe to emit now, whether a stop matched).

        Raises RuntimeError once a stop matched or :meth:`flush` was called.
        """
        if self._finished:
            state = (
                f"stop string {self._matched!r} matched" if self.stopped else "flushed"
            )
            raise RuntimeError(
                f"StopStringMatcher.feed called after the text ended ({state})"
            )
        # The held text holds no complete stop, so a new match must end inside
        # the delta and start inside held + delta: search only there.
        buffer = self._held + text_delta
        best: tuple[int, int, str] | None = None  # (end, -length, stop)
        for stop in self._stops:
            start = buffer.find(stop)
            if start >= 0:
                key = (start + len(stop), -len(stop), stop)
                if best is None or key < best:
                    best = key
        if best is not None:
            end, neg_length, stop = best
            self._matched = stop
            self._finished = True
            self._held = ""
            return buffer[: end + neg_length], True
        hold = self._held_length(buffer)
        self._held = buffer[len(buffer) - hold :]
        return buffer[: len(buffer) - hold], False

    def flush(self) -> str:
        """End the text: return what was held back (empty after a stop)."""
        self._finished = True
        held, self._held = self._held, ""
        return held

    def _held_length(self, buffer: str) -> int:
        """Length of the longest suffix of ``buffer`` that could begin a stop."""
        for length in range(min(len(buffer), self._max_hold), 0, -1):
            if buffer[-length:] in self._prefixes:
                return length
        return 0
