"""[env.args] declared as an attrs class: every problem named with its key and what it must be, in one error."""

from __future__ import annotations

import math
import re
from pathlib import Path

import attrs
import pytest

from minds_core import Rule, above, arg, at_least, env_args, non_empty_subset_of, one_of, within
from minds_core.base.errors import ConfigError
from minds_core.cli.command import main


@attrs.frozen
class Split:
    shuffle: bool = arg(False, doc="shuffle the split")
    num_samples: int | None = arg(None, at_least(1), doc="tasks kept (null: all)")


@attrs.frozen
class DemoArgs:
    name: str = arg(rule=Rule("a name without spaces", lambda v: " " not in v), doc="what the run is called")
    num_examples: int = arg(5, within(1, 10), doc="tasks per split")
    rate: float = arg(0.5, above(0), doc="a learning rate")
    kinds: list[str] = arg(["a", "b"], non_empty_subset_of(["a", "b", "c"]), doc="kinds drawn")
    reduction: str = arg("sum", one_of("sum", "mean"), doc="how rewards are reduced")
    splits: dict[str, Split] = arg({}, doc="per split settings")
    low: float | None = arg(None, doc="lower clamp")
    high: float | None = arg(None, doc="upper clamp")

    def problems(self):
        if self.low is not None and self.high is not None and self.low > self.high:
            yield f"low = {self.low} is above high = {self.high}"


def _error(args: dict) -> str:
    with pytest.raises(ConfigError) as raised:
        env_args(DemoArgs, args, env="demo")
    return str(raised.value)


def test_good_arguments_become_the_class_with_its_defaults():
    given = {"name": "x", "rate": 1, "splits": {"train": {"num_samples": 3}, "test": None}}
    got = env_args(DemoArgs, given, env="demo")
    assert got == DemoArgs(name="x", rate=1.0, splits={"train": Split(num_samples=3), "test": Split()})
    assert isinstance(got.rate, float) and got.kinds == ["a", "b"] and got.kinds is not DemoArgs(name="y").kinds


@pytest.mark.parametrize(
    ("value", "ok"), [(3, True), (0, False), (11, False), (True, False), ("4", False), (2.5, False)]
)
def test_an_integer_rule_names_the_key_and_its_bounds(value, ok):
    if ok:
        assert env_args(DemoArgs, {"name": "x", "num_examples": value}, env="demo").num_examples == value
    else:
        with pytest.raises(ConfigError, match=r"env\.args\.num_examples = .*: must be an integer in \[1, 10\]"):
            env_args(DemoArgs, {"name": "x", "num_examples": value}, env="demo")


def test_an_integral_float_counts_as_an_integer_as_in_the_run_config():
    assert env_args(DemoArgs, {"name": "x", "num_examples": 2.0}, env="demo").num_examples == 2


def test_every_problem_is_reported_at_once_with_the_keys_at_fault():
    message = _error(
        {"name": "a b", "num_examples": "many", "rate": math.nan, "kinds": ["d"], "reduction": "median",
         "splits": {"train": {"num_samples": 0, "shufle": True}}, "low": 2, "high": 1}
    )  # fmt: skip
    assert message.startswith(
        "environment 'demo': bad [env.args] ['kinds', 'name', 'num_examples', 'rate', 'reduction', 'splits']:\n"
    )
    for line in (
        "  - env.args.name = 'a b': must be a name without spaces",
        "  - env.args.num_examples = 'many': must be an integer in [1, 10] (expected an integer, got str)",
        "  - env.args.rate = nan: must be a finite number > 0",
        "  - env.args.kinds = ['d']: must be a non-empty list drawn from ['a', 'b', 'c']",
        "  - env.args.reduction = 'median': must be one of sum, mean",
        "  - env.args.splits.train.shufle: unknown key (did you mean shuffle?); valid keys here: shuffle, num_samples",
    ):
        assert line in message.splitlines()
    # checks across keys run once every value has the right type
    assert "low = 2.0 is above high = 1.0" in _error({"name": "x", "reduction": "median", "low": 2, "high": 1})


def test_unknown_and_missing_keys_list_the_accepted_arguments_and_what_they_mean():
    message = _error({"nmae": "x"})
    assert "  - env.args.nmae: unknown key (did you mean name?)" in message
    assert "  - env.args.name: required, not given" in message
    assert (
        "accepted arguments: name, num_examples (default 5), rate (default 0.5), kinds (default ['a', 'b']), "
        "reduction (default 'sum'), splits (default {}), low (default None), high (default None); required: name"
    ) in message
    assert "    num_examples: tasks per split" in message.splitlines()
    assert "tasks per split" not in _error({"name": "x", "num_examples": 0})  # a bad value: the list only


def test_a_rule_is_also_the_attrs_validator():
    with pytest.raises(ValueError, match=r"num_examples = 0: must be an integer in \[1, 10\]"):
        DemoArgs(name="x", num_examples=0)


def test_unknown_env_arg_lists_the_accepted_arguments(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--env", "ghost_trace", "--set", "env.args.num_exampels=3", "--backend", "local"])
    err = capsys.readouterr().err
    assert code == 2
    assert "['num_exampels']" in err
    assert "accepted arguments: num_examples (default 256), seed (default 0)" in err
    assert not (tmp_path / "runs").exists()


def test_a_loose_environment_lists_its_required_and_optional_arguments(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    task = tmp_path / "environments" / "my_args_task"
    task.mkdir(parents=True)
    (task / "__init__.py").write_text(
        "def load_environment(dataset_path, difficulty='easy', *, api_key=''):\n    raise AssertionError('not called')\n"
    )
    code = main(["run", "--env", "./environments/my_args_task", "--set", "env.args.level=3", "--backend", "local"])
    err = capsys.readouterr().err
    assert code == 2
    assert "accepted arguments: dataset_path, difficulty (default 'easy'), api_key; required: dataset_path" in err


def test_the_guide_example_checks_what_it_says():
    guide = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", guide, re.S) if "class CapitalsArgs" in b]
    namespace: dict = {}
    exec(compile(code.replace("    ...\n", "    return chosen\n"), "docs/plugins.md", "exec"), namespace)  # noqa: S102
    load = namespace["load_capitals"]
    assert load(region="europe", num_tasks=10).num_tasks == 10
    with pytest.raises(ConfigError) as raised:
        load(region="europe", num_tasks=60, hint="x" * 41, regoin="asia")
    message = str(raised.value)
    assert "env.args.regoin: unknown key (did you mean region?)" in message
    with pytest.raises(ConfigError) as raised:
        load(region="europe", num_tasks=60, hint="x" * 41)
    message = str(raised.value)
    assert "env.args.hint = 'xxxx" in message and "must be at most 40 characters" in message
    assert "env.args.num_tasks = 60: europe has 50 capitals" in message
