"""SampledStat: Kafka's sampled rate, average and maximum over 2 windows of 30 s."""

from __future__ import annotations

import pytest

from statestore.kafka.rates import SampledStat


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_young_stat_is_divided_by_its_age() -> None:
    clock = _Clock()
    stat = SampledStat(clock=clock)
    stat.record(50, 50)
    clock.now += 10
    stat.record(50, 50)
    assert stat.rate() == pytest.approx(100 / 10)


def test_rate_avg_and_max_cover_two_windows_then_forget() -> None:
    clock = _Clock()
    stat = SampledStat(clock=clock)
    stat.record(10.0)  # window 1: one observation of 10
    clock.now += 31
    stat.record(30.0)  # window 2: one of 30
    stat.record(20.0)
    assert stat.avg() == pytest.approx(20.0) and stat.max() == 30.0
    assert stat.rate() == pytest.approx(3 / 31)
    clock.now += 31  # window 3 starts: window 1 is dropped
    stat.record(1.0)
    assert stat.avg() == pytest.approx(51 / 3) and stat.max() == 30.0
    clock.now += 61  # nothing recorded for two windows: nothing kept
    assert (stat.rate(), stat.avg(), stat.max()) == (0.0, 0.0, 0.0)


def test_the_maximum_sees_each_observation_of_a_batch() -> None:
    stat = SampledStat(clock=_Clock())
    stat.record(100.0, 4)
    assert stat.max() == 25.0 and stat.avg() == 25.0
