"""--resume of a run whose config held secrets (not saved with the run): the resume goes on when they come again
(``--set``, or the environment variable the environment reads) and otherwise stops naming the keys to pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from minds_core.base.errors import ConfigError
from minds_core.base.secrets import REDACTED, without_redacted
from minds_core.cli.command import main
from minds_core.config import dump_yaml, load_config, to_dict
from minds_core.config.files import read_config_file
from minds_core.training.run_directory import config_changes, read_jsonl

SECRET, AGAIN = "sk-test-secret-4242", "sk-given-again-7373"

#: A seed-style environment that needs a key: from its args, else from KEYED_TEST_KEY.
KEYED_ENV = """\
import os


class Keyed:
    def initial_observation(self):
        return "Say something."

    def step(self, action_text):
        return {"reward": len(set(action_text)) / 8}


def load_environment(api_key=None, auth=None):
    if not (api_key or (auth or {}).get("token") or os.environ.get("KEYED_TEST_KEY")):
        raise ValueError("no API key: pass api_key or set KEYED_TEST_KEY")
    return Keyed()
"""

#: The two shapes a secret takes in [env.args]: a key of its own, or inside a table of its own.
SHAPES = {
    "api_key": ('api_key = "{secret}"', "env.args.api_key"),
    "auth": ('auth = {{ token = "{secret}" }}', "env.args.auth.token"),
}


@pytest.fixture(params=sorted(SHAPES))
def keyed_run(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A one-step run of the keyed environment, its key given in [env.args]; (its folder, the secret's key)."""
    line, key = SHAPES[request.param]
    folder = f"keyed_{tmp_path.name}"  # a module name of its own: modules imported by earlier tests stay imported
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "__init__.py").write_text(KEYED_ENV)
    (tmp_path / "run.toml").write_text(
        f'[env]\nid = "./{folder}"\n\n[env.args]\n{line.format(secret=SECRET)}\n\n'
        "[trainer]\ngroup_size = 4\ngroups_per_batch = 1\n\n[sampling]\nmax_tokens = 4\n\n[metrics]\nsinks = []\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KEYED_TEST_KEY", raising=False)
    assert main(["run", "run.toml", "--steps", "1", "--backend", "local", "--name", "r"]) == 0
    return tmp_path / "runs" / "r", key


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_resume_goes_on_when_the_secret_comes_from_the_environment(keyed_run, monkeypatch, capsys):
    run_dir, key = keyed_run
    monkeypatch.setenv("KEYED_TEST_KEY", "from-the-environment")
    assert main(["run", "--resume", str(run_dir), "--steps", "2"]) == 0
    err = capsys.readouterr().err
    assert "secrets are not saved with a run" in err and key in err
    assert "cannot change" not in err
    assert [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1]
    assert SECRET.encode() not in b"".join(_files(run_dir).values())


@pytest.mark.slow
def test_a_resume_goes_on_when_the_secret_is_passed_again(keyed_run, capsys):
    run_dir, key = keyed_run
    assert main(["run", "--resume", str(run_dir), "--steps", "2", "--set", f"{key}={AGAIN}"]) == 0
    assert "cannot change" not in capsys.readouterr().err
    assert [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1]
    written = b"".join(_files(run_dir).values())
    assert SECRET.encode() not in written and AGAIN.encode() not in written


@pytest.mark.slow
def test_a_resume_without_the_secret_stops_naming_it_and_changes_nothing(keyed_run, capsys):
    run_dir, key = keyed_run
    before = _files(run_dir)
    assert main(["run", "--resume", str(run_dir), "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert f"not given again: {key}; pass them again (--set KEY=VALUE)" in err
    assert "no API key" in err and "Traceback" not in err and "cannot change" not in err
    assert _files(run_dir) == before


#: A seed-style environment that needs the right key: given as it is, or as a reference ``$VARIABLE`` it reads.
CHECKED_ENV = f"""\
import os

from keyed_common import Keyed  # noqa: F401 (unused: the same episode as KEYED_ENV)


def load_environment(api_key=""):
    if api_key.startswith("$"):
        api_key = os.environ.get(api_key.lstrip("${{").rstrip("}}"), "")
    if api_key not in ({SECRET!r}, {AGAIN!r}):
        raise ValueError("wrong API key: " + ("none" if not api_key else "not the one issued"))
    return Keyed()
"""


@pytest.fixture
def listed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A one-step run of the checked environment as an entry of [[envs]], its key given as ``api_key``; a function
    starting it from that key's TOML value, returning its folder."""
    folder = f"checked_{tmp_path.name}"
    (tmp_path / folder).mkdir()
    (tmp_path / "keyed_common.py").write_text(KEYED_ENV)
    (tmp_path / folder / "__init__.py").write_text(CHECKED_ENV)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))

    def start(api_key: str) -> Path:
        (tmp_path / "run.toml").write_text(
            f'[[envs]]\nid = "./{folder}"\nargs = {{ api_key = "{api_key}" }}\n\n'
            "[trainer]\ngroup_size = 4\ngroups_per_batch = 1\n\n[sampling]\nmax_tokens = 4\n\n[metrics]\nsinks = []\n"
        )
        assert main(["run", "run.toml", "--steps", "1", "--backend", "local", "--name", "r"]) == 0
        return tmp_path / "runs" / "r"

    return start


@pytest.mark.slow
@pytest.mark.parametrize("reference", ["$LISTED_TEST_KEY", "${LISTED_TEST_KEY}"])
def test_a_secret_in_a_list_of_tables_given_as_a_reference_comes_back_from_its_variable(listed_run, reference, monkeypatch, capsys):
    monkeypatch.setenv("LISTED_TEST_KEY", SECRET)
    run_dir = listed_run(reference)
    assert reference in (run_dir / "config.yaml").read_text()  # a name, not a value: saved as it is
    assert main(["run", "--resume", str(run_dir), "--steps", "2"]) == 0
    assert "wrong API key" not in capsys.readouterr().err
    assert [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1]
    assert SECRET.encode() not in b"".join(_files(run_dir).values())


@pytest.mark.slow
def test_a_secret_in_a_list_of_tables_is_never_taken_from_the_saved_copy(listed_run, capsys):
    run_dir = listed_run(SECRET)
    assert SECRET not in (run_dir / "config.yaml").read_text()
    before = _files(run_dir)
    assert main(["run", "--resume", str(run_dir), "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "wrong API key: none" in err and "not given again: envs[0].args.api_key; pass them again (--set KEY=VALUE)" in err
    assert "Traceback" not in err and _files(run_dir) == before
    assert main(["run", "--resume", str(run_dir), "--steps", "2", "--set", f"envs[0].args.api_key={AGAIN}"]) == 0
    assert "cannot change" not in capsys.readouterr().err
    assert [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1]
    written = b"".join(_files(run_dir).values())
    assert SECRET.encode() not in written and AGAIN.encode() not in written


#: Every place a secret sits in a run's config, as ``--set`` names it, and the value given there.
PLACES = {
    "tinker.api_key": "tml-top-level-1",
    "envs[2].args.api_key": SECRET,
    "envs[2].args.auth.token": SECRET,
    "envs[0].args.api_key": SECRET,
    "envs[1].args.client.password": SECRET,
    "envs[1].args.headers[0].value": f"Bearer {SECRET}",
    "envs[0].rewards[0].args.judge_token": SECRET,
    "envs[0].args.credentials": [SECRET, AGAIN],
}
#: A config holding every place of PLACES, with references to variables beside them.
EVERYWHERE = {
    "tinker": {"api_key": PLACES["tinker.api_key"], "api_key_env": "MY_TINKER_KEY"},
    "envs": [
        {"id": "y", "args": {"api_key": SECRET, "credentials": [SECRET, AGAIN], "judge_key": "${JUDGE_KEY}"},
         "rewards": [{"name": "r", "args": {"judge_token": SECRET}}]},
        {"id": "z", "args": {"client": {"password": SECRET, "user": "u"}, "secrets": {"OPENAI_API_KEY": "$OPENAI_API_KEY",
         "HF_TOKEN": "${HF_TOKEN:-}"}, "headers": [{"name": "Authorization", "value": f"Bearer {SECRET}"},
                                                   {"name": "Accept", "value": "text/plain"}]}},
        {"id": "x", "args": {"api_key": SECRET, "auth": {"token": SECRET}}},
    ],
}  # fmt: skip


def _saved(tmp_path: Path, data: dict) -> Path:
    """``data`` as the config.yaml a run writes."""
    (tmp_path / "given.yaml").write_text(dump_yaml(load_config(_written(tmp_path, data))))
    return tmp_path / "given.yaml"


def _written(tmp_path: Path, data: dict) -> Path:
    import yaml

    (tmp_path / "source.yaml").write_text(yaml.safe_dump(data))
    return tmp_path / "source.yaml"


def _leaves(value) -> list:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def test_a_saved_config_reloads_without_any_redacted_value_in_tables_or_lists_of_tables(tmp_path):
    saved = _saved(tmp_path, EVERYWHERE)
    assert SECRET not in saved.read_text() and AGAIN not in saved.read_text()
    config = load_config(saved, drop_redacted=True)
    data = to_dict(config)
    assert not [leaf for leaf in _leaves(data) if isinstance(leaf, str) and REDACTED in leaf]  # never the saved copy
    assert data["envs"][1]["args"]["secrets"] == {"OPENAI_API_KEY": "$OPENAI_API_KEY", "HF_TOKEN": "${HF_TOKEN:-}"}
    assert data["envs"][0]["args"]["judge_key"] == "${JUDGE_KEY}" and data["tinker"]["api_key_env"] == "MY_TINKER_KEY"
    assert data["envs"][1]["args"]["headers"][1] == {"name": "Accept", "value": "text/plain"}
    dropped: list[str] = []
    without_redacted(read_config_file(saved), "", dropped)
    assert sorted(dropped) == sorted(PLACES)  # named as --set names them, to be given again


def test_secrets_given_again_in_lists_of_tables_are_no_change_of_what_the_run_is(tmp_path):
    saved = _saved(tmp_path, EVERYWHERE)
    again = [f"{key}={value}" for key, value in PLACES.items() if not isinstance(value, list)] + [f"envs[0].args.credentials=[{AGAIN}]"]
    before, after = load_config(_written(tmp_path, EVERYWHERE)), load_config(saved, again, drop_redacted=True)
    assert after.envs[0].args["api_key"] == SECRET and after.envs[1].args["headers"][0]["value"] == f"Bearer {SECRET}"
    assert config_changes(before, after) == {}
    assert config_changes(before, load_config(saved, drop_redacted=True)) == {}  # nor are secrets not given


def test_a_url_whose_password_was_not_saved_must_be_given_again_whole(tmp_path):
    url = f"https://bob:{SECRET}@db.example.com/v1?api_key={AGAIN}&page=2"
    saved = _saved(tmp_path, {"envs": [{"id": "y", "args": {"endpoint": url, "mirror": f"https://h/?token={AGAIN}"}}]})
    with pytest.raises(ConfigError) as refused:
        load_config(saved, drop_redacted=True)
    message = str(refused.value)
    assert "envs[0].args.endpoint, envs[0].args.mirror: the password (or secret parameter) of this URL is not saved" in message
    assert "--set KEY=VALUE" in message and SECRET not in message and AGAIN not in message
    config = load_config(saved, [f"envs[0].args.endpoint={url}", f"envs[0].args.mirror=https://h/?token={AGAIN}"], drop_redacted=True)
    assert config.envs[0].args["endpoint"] == url
    config = load_config(saved, [f"envs[0].args={{endpoint: '{url}'}}"], drop_redacted=True)  # the table around them, given again
    assert config.envs[0].args == {"endpoint": url}


@pytest.mark.parametrize(
    ("assignment", "says"),
    [
        ("envs[2].args.api_key=x", "--set envs[2].args.api_key: no entry [2]: envs holds 2 entries"),
        ("trainer[0].steps=3", "--set trainer[0].steps: trainer is a table, not a list: it has no entry [0]"),
        ("envs[0].wieght=2", "--set envs[0].wieght: unknown key (did you mean weight?)"),
    ],
)
def test_a_list_index_in_set_names_an_entry_that_exists(tmp_path, assignment, says):
    path = _written(tmp_path, {"envs": [{"id": "y"}, {"id": "z"}]})
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_config(path, [assignment])
    assert load_config(path, ["envs[1].args.api_key=x", "envs[0].weight=2"]).envs[1].args == {"api_key": "x"}
