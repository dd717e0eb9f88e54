"""One cache variable: $KERNELFLOW_CACHE_DIR for the evaluator (calibrations, GPU locks) and the trainer
(locally built policies); the train layer's old $KERNELFLOW_CACHE is still read, with a warning."""

import warnings
from pathlib import Path

import pytest

from kernelflow.cache_dir import CACHE_ENV_VAR, DEPRECATED_CACHE_ENV_VAR, cache_root


def test_the_variable_names_the_cache_of_both_layers(monkeypatch, tmp_path):
    from kernelflow.eval.clock.timing import cache_dir
    from kernelflow.train.tiny import default_cache_dir

    monkeypatch.delenv(DEPRECATED_CACHE_ENV_VAR, raising=False)
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "c"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache_dir() == tmp_path / "c"  # the evaluator (created there)
        assert default_cache_dir() == tmp_path / "c" / "tiny"  # the trainer's built policies
    assert cache_dir(str(tmp_path / "configured")) == tmp_path / "configured"  # EvalConfig's own setting wins


def test_unset_is_the_home_cache():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache_root({}) == Path.home() / ".cache" / "kernelflow"


def test_the_old_name_is_read_with_a_deprecation_message():
    with pytest.warns(FutureWarning, match="KERNELFLOW_CACHE is deprecated: set KERNELFLOW_CACHE_DIR=/old"):
        assert cache_root({DEPRECATED_CACHE_ENV_VAR: "/old"}) == Path("/old")


def test_both_names_the_new_one_wins_and_the_old_is_named():
    with pytest.warns(FutureWarning, match="KERNELFLOW_CACHE=/old is ignored: KERNELFLOW_CACHE_DIR=/new"):
        assert cache_root({DEPRECATED_CACHE_ENV_VAR: "/old", CACHE_ENV_VAR: "/new"}) == Path("/new")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache_root({DEPRECATED_CACHE_ENV_VAR: "/same", CACHE_ENV_VAR: "/same"}) == Path("/same")
