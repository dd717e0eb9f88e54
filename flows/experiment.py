"""`python -m flows.experiment [overrides]`: compose the config with Hydra and run the experiment as one Prefect flow.

The flow itself (stages, resume, MLflow, failure handling) is in experiment_flow.py; this module is
the command line: it composes and checks the config, prints the plan (`dry_run=true`), runs the
flow and says how it ended.

Exit status, as for the `kernelflow` CLI (kernelflow/cli.py): 0 the run completed (or the plan was
printed); 1 the run failed (the message names the stage and how to resume); 2 the command line or
config was refused before anything ran, with one `kernelflow: config error: ...` message naming the
override, what is wrong and what to set. That covers what Hydra refuses while composing (an unknown
key, a value of the wrong type, an unknown option of a config group, an override it cannot parse)
and what the layers' dataclasses refuse after it (a bad value). Hydra's own exit status for those
is 1, the same as a failed run, and its message names internal schema classes; so, unless
`HYDRA_FULL_ERROR` is set (then Hydra's full traces are shown as usual), composition errors are
taken over here. An unknown command-line flag is argparse's, exit 2.

Refusing a bad override is fast (~0.5 s, not ~11 s): composing needs only the layers' settings
dataclasses, and Prefect, MLflow, torch and openenv are imported only once the config is good
(experiment_flow.py, plan.py). Keep heavy imports out of the module level here and of flows/config.py.
"""

from __future__ import annotations

if __name__ == "__main__":  # the entry point only: Prefect's defaults before Prefect is imported (not on import)
    from flows import prefect_settings

    prefect_settings.apply()

import dataclasses
import difflib
import logging
import os
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from flows.config import ExperimentConfig, register, to_experiment_config
from flows.schema import ConfigError

register()

CONF_HINT = "`python -m flows.experiment --cfg job` prints the composed config; conf/ holds the groups and presets"
_FULL_ERROR = "HYDRA_FULL_ERROR"


def config_error_message(exc: BaseException) -> str:
    """One message for what Hydra refused while composing: which override, what is wrong, what to do."""
    cause = exc.__cause__ if isinstance(exc.__cause__, OmegaConfBaseException) else exc
    if isinstance(exc, MissingConfigException) and exc.options and exc.missing_cfg_file:
        # e.g. experiment=nope: Hydra names the missing file; say which options the group has
        group, _, choice = exc.missing_cfg_file.rpartition("/")
        close = difflib.get_close_matches(choice, exc.options, n=1)
        did_you_mean = f"did you mean {group}={close[0]}? " if close else ""
        return (f"{group}={choice}: the config group '{group}' has no option '{choice}'; {did_you_mean}"
                f"choose one of {', '.join(exc.options)} (the YAML files in conf/{group}/)")
    if isinstance(exc, OverrideParseException):
        why = "; ".join(line.strip() for line in exc.message.splitlines() if line.strip())
        return f"cannot parse the override {exc.override!r}: {why} (an override is KEY=VALUE; {CONF_HINT})"
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        fields = _schema_fields(cause.object_type)
        if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and cause.key not in fields:
            return _unknown_key_message(str(cause.full_key), str(cause.key), list(fields))
        # a value of the wrong type: OmegaConf's first line says which value and what it could not convert to
        what = str(cause.msg).strip().splitlines()[0]
        wanted = f" ({cause.full_key} is {_type_name(fields[cause.key])})" if cause.key in fields else ""
        return f"{cause.full_key}: {what}{wanted}; give a value of that type ({CONF_HINT})"
    what = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    return f"{what} ({CONF_HINT})"


def _unknown_key_message(full_key: str, key: str, known: list[str]) -> str:
    """`trainer.epoch=3`: the node has no such key; name the closest keys it has, or all of them."""
    parent = full_key[: -len(key)].rstrip(".")
    where = f"'{parent}'" if parent else "the experiment config"
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    if close:
        suggestion = " or ".join(f"'{parent + '.' if parent else ''}{k}'" for k in close)
        return f"{full_key}: {where} has no key '{key}'; did you mean {suggestion}? ({CONF_HINT})"
    listed = f"; its keys are {', '.join(known)}" if known else ""
    return f"{full_key}: {where} has no key '{key}'{listed} ({CONF_HINT})"


def _schema_fields(node_type: object) -> dict[str, object]:
    """Field name -> type of a schema node (a dataclass: the mirrors in flows/schema.py, or ExperimentSchema)."""
    if isinstance(node_type, type) and dataclasses.is_dataclass(node_type):
        return {f.name: f.type for f in dataclasses.fields(node_type)}
    return {}


def _type_name(tp: object) -> str:
    """`int`, `float`, `list[str]`, `Optional[int]`, ... for a schema field type (a type or a string annotation)."""
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    _restore_full_error()  # composition is over: the run's own errors are reported below, not taken over
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per Prefect API call otherwise
    try:
        config = to_experiment_config(cfg)
    except ConfigError as exc:
        print(f"kernelflow: config error: {exc}", file=sys.stderr)
        sys.exit(2)
    if config.dry_run:
        from flows.plan import render_plan

        print(render_plan(config))
        return
    run(config, list(HydraConfig.get().overrides.task))


def run(config: ExperimentConfig, overrides: list[str]) -> None:
    """Run the flow (imports Prefect, MLflow and the trainer) and print how it ended; a failure exits 1."""
    from flows.experiment_flow import failure_message, run_experiment

    try:
        out = run_experiment(config, overrides)
    except Exception as exc:  # noqa: BLE001 - every failure is reported the same way, with its cause
        print(failure_message(config, exc), file=sys.stderr)
        sys.exit(1)
    finally:
        # Prefect's exit-time INFO lines (stopping its temporary server) would follow the final line.
        logging.getLogger("prefect").setLevel(logging.WARNING)
    if config.policy_note:
        print(f"note: the policy of this run is {config.policy_note}")
    print(f"kernelflow: run complete: {out['run_dir']} ; report: {out['report']} ; MLflow: {out['mlflow']}")


_set_full_error = False


def _restore_full_error() -> None:
    """Unset HYDRA_FULL_ERROR if `cli` set it, so the environment server and trainer do not inherit it."""
    global _set_full_error
    if _set_full_error:
        os.environ.pop(_FULL_ERROR, None)
        _set_full_error = False


def cli() -> None:
    """`main` with Hydra's composition errors turned into kernelflow's: one message, exit 2."""
    global _set_full_error
    if os.environ.get(_FULL_ERROR):  # the user asked for Hydra's full traces: leave Hydra's reporting alone
        main()
        return
    # With HYDRA_FULL_ERROR set, Hydra raises what it refuses instead of printing it and exiting 1,
    # so the error reaches us typed. Every job's config is composed (and checked) before the first
    # job runs, multiruns included, so nothing a run raises is taken for a usage error.
    os.environ[_FULL_ERROR] = "1"
    _set_full_error = True
    try:
        main()
    except (HydraException, OmegaConfBaseException) as exc:
        print(f"kernelflow: config error: {config_error_message(exc)}", file=sys.stderr)
        sys.exit(2)
    finally:
        _restore_full_error()


if __name__ == "__main__":
    cli()
