from __future__ import annotations

import pytest

from changelog import CleanerConfig, InvalidConfigError, LogConfig


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1073741824
    assert config.index_interval_bytes == 4096
    assert config.delete_retention_ms == 86400000
    assert config.min_cleanable_dirty_ratio == 0.5
    assert config.compact and not config.delete


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("segment_bytes", 0),
        ("segment_bytes", 2**31),
        ("segment_ms", 0),
        ("cleanup_policy", "keep"),
        ("min_cleanable_dirty_ratio", 1.5),
        ("retention_ms", -2),
        ("flush_messages", 0),
        ("index_interval_bytes", "4096"),
        ("segment_bytes", True),
        ("preallocate", "true"),
        ("preallocate", 1),
        ("preallocate_extent_bytes", 0),
    ],
)
def test_nonsense_is_rejected(setting: str, value: object) -> None:
    with pytest.raises(InvalidConfigError) as info:
        LogConfig(**{setting: value})  # type: ignore[arg-type]
    assert info.value.setting == setting


def test_lags_must_be_ordered() -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig(min_compaction_lag_ms=10, max_compaction_lag_ms=5)


def test_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        LogConfig(1024)  # type: ignore[misc]
    config = LogConfig(cleanup_policy="compact,delete")
    assert config.compact and config.delete
    with pytest.raises(AttributeError):
        config.segment_bytes = 5  # type: ignore[misc]


def test_cleaner_config_rejects_nonsense() -> None:
    with pytest.raises(InvalidConfigError):
        CleanerConfig(io_max_bytes_per_second=0)
    with pytest.raises(InvalidConfigError):
        CleanerConfig(threads=0)
