"""Regressions found by trying this session's features as a new user (distill.reasoning none,
content rules, object storage, benchmarks)."""
from __future__ import annotations

import pytest

from pipeline.core.config import ConfigError, from_dict


def test_reasoning_none_needs_empty_think_flag():
    """reasoning none with the default empty_think quarantine exported 0 pairs with exit 0
    (25 of 25 candidate pairs of the react-alfworld sample quarantined as empty_think)."""
    with pytest.raises(ConfigError) as e:
        from_dict({"distill": {"reasoning": "none"}})
    assert str(e.value) == ("build_pairs.empty_think: must be flag with distill.reasoning: none (every think is "
                            "empty; quarantine drops every pair and the export has none)")
    cfg = from_dict({"distill": {"reasoning": "none"}, "build_pairs": {"empty_think": "flag"}})
    assert (cfg.distill.reasoning, cfg.build_pairs.empty_think) == ("none", "flag")
