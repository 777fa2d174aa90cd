"""The ``harness`` environment: an unmodified ``openai``-SDK agent program trained through the run's endpoint.

The program is a real subprocess using the official SDK, configured by the environment variables the
episode sets; the tokens trained are compared with the tokens the endpoint recorded, and programs that
fail in each way the issue names fail only their own rollout, with the reason.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from minds_core.base.errors import ConfigError

pytestmark = pytest.mark.slow

AGENT = textwrap.dedent(
    '''
    """A short tool-calling agent: ask, run the tools the model calls, ask again; print the reward."""
    import json
    import sys

    from openai import OpenAI

    task = json.loads(sys.stdin.read())
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the episode
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": task["prompt"]}]
    for turn in range(2):
        reply = client.chat.completions.create(model="whatever-name", messages=messages, tools=tools, max_tokens=8)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
        for call in message.tool_calls or []:
            args = json.loads(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(sum(args.values()))})
        if not message.tool_calls:
            messages.append({"role": "user", "content": "Check it."})
    print("some log line")
    # a reward that differs between rollouts (so every one trains): from the token ids the endpoint reports
    print(json.dumps({"reward": sum(reply.choices[0].token_ids) % 97 / 97}))
    '''
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_an_openai_sdk_agent_trains_on_exactly_the_tokens_it_was_served(
    tmp_path: Path, minds_env_run: Any, served_and_trained: Any
) -> None:
    agent = write(tmp_path, "agent.py", AGENT)
    tasks = write(tmp_path, "tasks.jsonl", '{"prompt": "2+3?"}\n{"prompt": "4+4?"}\n')
    result = minds_env_run(
        "harness",
        args={"command": [sys.executable, str(agent)], "tasks": str(tasks)},
        steps=3,
        overrides=["rollout.drop_constant_reward_groups=false"],
    )
    assert result.exit_code == 0, result.error
    assert len(result.metrics) == 3 and all(m["rollouts/failed"] == 0 for m in result.metrics)
    assert all(m["env/harness/harness/calls"] == 2 for m in result.metrics), result.metrics[0]
    # every rollout's calls, as the endpoint recorded them, are the sequences trained: token for token
    expected = served_and_trained.assert_trained_as_served()
    assert len(served_and_trained.recorded) == 12 and len(served_and_trained.trained) == len(expected) >= 12
    versions = {call.version for calls in served_and_trained.recorded for call in calls}
    assert versions == {0, 1, 2}  # each step's episodes were answered by that step's policy


FAILING = {
    "crash": "import sys; sys.exit('it broke')",
    "garbage": """
        from openai import OpenAI
        OpenAI().completions.create(model="m", prompt="hi", max_tokens=2)
        print("not json at all")
        """,
    "hang": "import time; time.sleep(600)",
    "no_call": "print('{\"reward\": 1}')",
    "stdout_flood": "import sys\nwhile True: sys.stdout.write('x' * 65536)",
    "endpoint_flood": """
        from openai import OpenAI
        client = OpenAI(max_retries=0)
        for _ in range(5):
            client.completions.create(model="m", prompt="hi", max_tokens=1)
        """,
    "late_call": """
        import json, os, subprocess, sys
        late = "import time, openai; time.sleep(2)\\n" \\
            "try:\\n    openai.OpenAI(max_retries=0).completions.create(model='m', prompt='x', max_tokens=1); r = 'answered'\\n" \\
            "except openai.AuthenticationError: r = 'refused'\\n" \\
            "except Exception as e: r = repr(e)\\n" \\
            f"open({os.environ['MINDS_TASK_OUT']!r}, 'w').write(r)"
        from openai import OpenAI
        OpenAI().completions.create(model="m", prompt="hi", max_tokens=2)
        subprocess.Popen([sys.executable, "-c", late], start_new_session=True)
        print(json.dumps({"reward": 1.0}))
        """,
}


def test_each_failing_program_fails_only_its_rollout_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, minds_env_run: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    program = write(
        tmp_path,
        "agent.py",
        "import json, os\nmode = json.loads(os.environ['MINDS_TASK'])['mode']\n"
        + "".join(
            f"if mode == {mode!r}:\n" + textwrap.indent(textwrap.dedent(code).strip(), "    ") + "\n"
            for mode, code in FAILING.items()
        )
        + "if mode == 'anthropic':\n    import anthropic\n    reply = anthropic.Anthropic().messages.create(model='claude-any', max_tokens=4, "
        + "messages=[{'role': 'user', 'content': 'hi'}])\n    print(json.dumps({'reward': sum(reply.token_ids) % 97}))\n"
        + "if mode == 'good':\n    from openai import OpenAI\n    reply = OpenAI().completions.create(model='m', prompt='hi', max_tokens=4)\n"
        + "    print(json.dumps({'reward': sum(reply.choices[0].token_ids) % 97}))\n",
    )
    modes = ["good", "anthropic", *FAILING]
    tasks = write(tmp_path, "tasks.jsonl", "".join(json.dumps({"prompt": mode, "mode": mode}) + "\n" for mode in modes))
    late_out = tmp_path / "late.txt"
    monkeypatch.setenv("MINDS_TASK_OUT", str(late_out))
    result = minds_env_run(
        "harness",
        args={"command": f"{sys.executable} {program}", "tasks": str(tasks), "max_calls": 3, "max_output_bytes": 100_000},
        steps=1,
        overrides=[f"trainer.groups_per_batch={len(modes)}", "trainer.group_size=2", "rollout.timeout=30", "rollout.retries=0",
                   "rollout.max_failing_rollouts=1", "rollout.drop_constant_reward_groups=false"],
    )  # fmt: skip
    logged = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    errors = {event["task"]: event["error"] for event in logged if event.get("event") == "rollout failed"}
    reasons = {
        "crash": "exited with code 1; its stderr ends: it broke",
        "garbage": "last stdout line is not",
        "hang": "timed out after 30 s",
        "no_call": "made no call",
        "stdout_flood": "more than max_output_bytes = 100000",
        "endpoint_flood": "flooded the endpoint",
    }
    by_mode = {mode: errors.get(f"tasks-{i}", "") for i, mode in enumerate(modes, 1)}
    for mode, words in reasons.items():
        assert words in by_mode[mode], (mode, by_mode[mode])
    assert by_mode["good"] == by_mode["anthropic"] == by_mode["late_call"] == ""
    assert result.exit_code == 0, result.error  # the run goes on: the good tasks trained
    metrics = result.metrics[0]
    assert metrics["rollouts/failed"] == 2 * len(reasons) and metrics["rollouts/timed_out"] == 2 and metrics["train/datums"] >= 2
    import time

    deadline = time.monotonic() + 60  # the late child sleeps 2 s, then imports the SDK (slow on a busy machine)
    while not late_out.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert late_out.read_text() == "refused"  # a call after its episode ended is refused, not recorded


def test_bad_arguments_are_config_errors(tmp_path: Path) -> None:
    from minds_core.agents.harness import load_harness

    tasks = write(tmp_path, "tasks.jsonl", '{"prompt": "x"}\n')
    with pytest.raises(ConfigError, match="is empty"):
        load_harness(command=[], tasks=str(tasks))
    with pytest.raises(ConfigError, match="cannot read it"):
        load_harness(command="python a.py", tasks=str(tmp_path / "missing.jsonl"))
    bad = write(tmp_path, "bad.jsonl", '{"prompt": "x"}\n{"no_prompt": 1}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:2: a task must be a JSON object with a \"prompt\""):
        load_harness(command="python a.py", tasks=str(bad))
    with pytest.raises(ConfigError, match="cannot be split"):
        load_harness(command="python 'unclosed", tasks=str(tasks))


def test_a_scorer_and_reward_functions_score_a_program_that_prints_no_reward(tmp_path: Path, minds_env_run: Any) -> None:
    program = write(
        tmp_path,
        "agent.py",
        """
        from openai import OpenAI
        OpenAI().chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=6)
        print("done, no reward line")
        """,
    )
    scorer = write(
        tmp_path,
        "scorer.py",
        """
        import json, os, sys
        given = json.load(sys.stdin)
        assert given["stdout"].strip() == "done, no reward line" and os.environ["MINDS_TASK"]
        print(json.dumps({"reward": sum(map(ord, given["replies"][-1])) % 7}))
        """,
    )
    tasks = write(tmp_path, "tasks.jsonl", '{"prompt": "a"}\n{"prompt": "b"}\n')
    result = minds_env_run(
        "harness",
        args={"command": [sys.executable, str(program)], "tasks": str(tasks), "scorer": [sys.executable, str(scorer)]},
        steps=1,
        overrides=['env.rewards=[{"name": "minds.length_penalty"}]', "rollout.drop_constant_reward_groups=false"],
    )
    assert result.exit_code == 0, result.error
    assert result.metrics[0]["rollouts/failed"] == 0
    metrics = result.metrics[0]
    assert "env/harness/harness/scorer_reward" in metrics  # the scorer's reward
    # the group reward function scored the replies: +0.5 for the shorter, or 0 for both when they tie
    assert metrics["env/harness/reward/minds.length_penalty/max"] in (0.0, 0.5)
