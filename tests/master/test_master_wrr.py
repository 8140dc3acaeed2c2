from collections import Counter

from master.wrr import WeightedRoundRobin


def test_choices_follow_the_weights_over_a_cycle():
    robin = WeightedRoundRobin()
    weights = {"a": 360, "b": 420, "c": 480}
    assert Counter(robin.sequence(weights, 21)) == {"a": 6, "b": 7, "c": 8}


def test_thesis_order_interleaves_rather_than_runs():
    robin = WeightedRoundRobin()
    assert robin.sequence({"a": 4, "b": 2, "c": 1}, 7) == ["a", "a", "a", "b", "a", "b", "c"]


def test_sequence_does_not_advance_until_told():
    robin = WeightedRoundRobin()
    weights = {"a": 1, "b": 1}
    first = robin.sequence(weights, 3)
    assert robin.sequence(weights, 3) == first
    robin.advance(weights, 1)
    assert robin.sequence(weights, 2) == first[1:3]


def test_weights_may_change_between_calls():
    robin = WeightedRoundRobin()
    robin.advance({"a": 5, "b": 5, "c": 5}, 4)
    counts = Counter(robin.sequence({"a": 1, "b": 3}, 400))
    assert counts == {"a": 100, "b": 300}
