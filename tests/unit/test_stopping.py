"""Tests for webui.engine.stopping.StopStringMatcher."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webui.engine.stopping import StopStringMatcher


def run(
    stops: list[str], deltas: list[str]
) -> tuple[list[str], bool, StopStringMatcher]:
    """Feed deltas until a stop; return the emitted pieces and whether it stopped."""
    matcher = StopStringMatcher(stops)
    pieces: list[str] = []
    for delta in deltas:
        text, stopped = matcher.feed(delta)
        pieces.append(text)
        if stopped:
            return pieces, True, matcher
    pieces.append(matcher.flush())
    return pieces, False, matcher


def expected_output(text: str, stops: list[str]) -> str:
    """Reference: cut before the stop occurrence that ends first (longest on a tie)."""
    found = [
        (text.find(stop) + len(stop), -len(stop)) for stop in stops if stop in text
    ]
    if not found:
        return text
    end, neg_length = min(found)
    return text[: end + neg_length]


def test_holds_back_a_possible_stop_prefix_until_decided() -> None:
    matcher = StopStringMatcher(["Hello"])
    assert matcher.feed("Hel") == ("", False)
    assert matcher.feed("p") == ("Help", False)
    assert matcher.flush() == ""
    assert matcher.matched is None


def test_holds_back_only_what_could_still_become_a_stop() -> None:
    matcher = StopStringMatcher(["Hello"])
    assert matcher.feed("say Hel") == ("say ", False)
    assert matcher.feed("lx and H") == ("Hellx and ", False)
    assert matcher.flush() == "H"


def test_stop_split_across_many_deltas() -> None:
    matcher = StopStringMatcher(["<|end|>"])
    outputs = [matcher.feed(delta) for delta in ["Answer", " 42", "<", "|", "en", "d|"]]
    assert outputs == [
        ("Answer", False),
        (" 42", False),
        ("", False),
        ("", False),
        ("", False),
        ("", False),
    ]
    assert matcher.feed(">tail") == ("", True)
    assert matcher.matched == "<|end|>"
    assert matcher.stopped


def test_several_stops_the_earliest_wins() -> None:
    matcher = StopStringMatcher(["STOP", "END", "###"])
    assert matcher.feed("one END two ### three STOP") == ("one ", True)
    assert matcher.matched == "END"


def test_stop_in_the_middle_of_a_delta_drops_the_rest() -> None:
    matcher = StopStringMatcher(["\nUser:"])
    assert matcher.feed("Hi") == ("Hi", False)
    assert matcher.feed(" there!\nUser: next turn") == (" there!", True)
    assert matcher.flush() == ""


def test_overlapping_stops_shorter_completes_first() -> None:
    # "ab" is complete before "abc" could be; split or not, "ab" wins.
    assert run(["abc", "ab"], ["xa", "b", "c"])[0] == [
        "x",
        "",
    ]
    pieces, stopped, matcher = run(["abc", "ab"], ["xabc"])
    assert (pieces, stopped, matcher.matched) == (["x"], True, "ab")


def test_stop_with_repeated_prefix() -> None:
    matcher = StopStringMatcher(["aab"])
    assert matcher.feed("a") == ("", False)
    assert matcher.feed("a") == ("", False)
    assert matcher.feed("a") == ("a", False)  # the first "a" can no longer start "aab"
    assert matcher.feed("b") == ("", True)
    assert matcher.matched == "aab"


def test_no_stops_emits_everything_at_once() -> None:
    matcher = StopStringMatcher([])
    assert matcher.feed("any text") == ("any text", False)
    assert matcher.feed("") == ("", False)
    assert matcher.flush() == ""


def test_flush_returns_held_text() -> None:
    matcher = StopStringMatcher(["</s>"])
    assert matcher.feed("done</") == ("done", False)
    assert matcher.flush() == "</"
    assert matcher.matched is None


def test_empty_stop_is_rejected() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        StopStringMatcher(["ok", ""])


def test_a_bare_string_is_rejected() -> None:
    with pytest.raises(TypeError, match="not a string"):
        StopStringMatcher("###")  # a str is a Sequence[str]; caught at runtime


def test_feed_after_stop_or_flush_is_an_error() -> None:
    matcher = StopStringMatcher(["x"])
    assert matcher.feed("ax") == ("a", True)
    with pytest.raises(RuntimeError, match="'x' matched"):
        matcher.feed("more")
    flushed = StopStringMatcher(["x"])
    flushed.flush()
    with pytest.raises(RuntimeError, match="flushed"):
        flushed.feed("more")


@st.composite
def text_splits_and_stops(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    # A small alphabet makes stops, overlaps and near misses common.
    alphabet = st.sampled_from("abc\n")
    text = draw(st.text(alphabet, max_size=40))
    stops = draw(st.lists(st.text(alphabet, min_size=1, max_size=4), max_size=3))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=10)))
    bounds = [0, *cuts, len(text)]
    deltas = [text[lo:hi] for lo, hi in itertools.pairwise(bounds)]
    return text, stops, deltas


@given(text_splits_and_stops())
def test_output_is_independent_of_how_the_text_is_split(
    case: tuple[str, list[str], list[str]],
) -> None:
    text, stops, deltas = case
    pieces, stopped, matcher = run(stops, deltas)
    assert "".join(pieces) == expected_output(text, stops)
    assert stopped == any(stop in text for stop in stops)
    if stopped:
        assert matcher.matched in stops
    # Nothing emitted is ever part of a stop string that later completes.
    assert all(stop not in "".join(pieces) for stop in stops)
