"""LLM-as-judge rewards with a local judge model: on the service, behind an OpenAI-compatible endpoint, from config."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from minds_core.backends import create_local_service
from minds_core.base import logs
from minds_core.base.errors import ConfigError
from minds_core.config import load_config
from minds_core.contract.environment import Context
from minds_core.contract.plugins import load_plugins
from minds_core.envs.judge import JudgeError, LLMJudge, parse_score
from minds_core.envs.render import Renderer
from minds_core.train import train

QUESTION = "Does the reply contain the letter a?"
KEY = "judge-key-do-not-leak"
VERDICTS = [f"Score: {n}" for n in range(11)]


def test_parse_score_takes_the_last_score_in_range():
    assert parse_score("Reasoning... Score: 3\nScore: 7", 10) == pytest.approx(0.7, abs=1e-15)
    assert parse_score("score = 2.5", 5) == 0.5
    with pytest.raises(JudgeError, match="no 'Score: N'"):
        parse_score("seven", 10)
    with pytest.raises(JudgeError, match="outside 0..10"):
        parse_score("Score: 11", 10)


@pytest.fixture(scope="module")
def judge_model(tmp_path_factory):
    """A local judge: the tiny model fine-tuned (minds sft) to grade every reply 'Score: 7'."""
    logs.configure("json", "warning")
    root = tmp_path_factory.mktemp("judge")
    rng, judge = random.Random(0), LLMJudge(question=QUESTION)
    rows = []
    for i in range(48):
        reply = "".join(rng.choice("abcxyz ") for _ in range(rng.randint(1, 12)))
        rows.append({"messages": [*judge.messages(f"Write a's ({i})", reply), {"role": "assistant", "content": "Score: 7"}]})
    (root / "judge.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = load_config(None, ["trainer.mode=sft", f"sft.data={root / 'judge.jsonl'}", "trainer.steps=60", "trainer.learning_rate=1e-2",
                                "metrics.sinks=[]", f"runs_dir={root}", "name=judge"])
    train(config, plugins=load_plugins())
    path = json.loads((root / "judge" / "checkpoints.jsonl").read_text().splitlines()[-1])["sampler_path"]
    return config, root, path


@pytest.mark.slow
def test_a_judge_on_the_service_scores_and_caches(judge_model):
    config, root, path = judge_model
    service = create_local_service(config, root)
    ctx = Context(sampler=None, tokenizer=None, service=service, renderer=None, base_model="minds-tiny")
    judge = LLMJudge(question=QUESTION, model=path, max_concurrency=2)
    states = [{} for _ in range(5)]

    async def score() -> list:
        return await asyncio.gather(*(judge(f"Write ({i})", f"reply {i}", states[i], ctx) for i in range(4)))

    assert asyncio.run(score()) == [0.7] * 4 and judge.calls == 4
    assert asyncio.run(judge("Write (2)", "reply 2", states[4], ctx)) == 0.7  # a cached verdict: no request
    assert judge.calls == 4 and states[4] == {"metrics": {"judge/cached": 1.0}}
    assert states[0] == {"metrics": {"judge/calls": 1.0}}


class _Endpoint(BaseHTTPRequestHandler):
    """An OpenAI-compatible /chat/completions served by the local judge model."""

    sampler = renderer = None
    lock = threading.Lock()
    in_flight = peak = 0

    def do_POST(self):  # the http.server API
        cls = type(self)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            return self._reply(401, {"error": "bad key"})
        if "FAIL" in body["messages"][-1]["content"]:
            return self._reply(500, {"error": "judge overloaded"})
        with cls.lock:
            cls.in_flight += 1
            cls.peak = max(cls.peak, cls.in_flight)
        try:
            time.sleep(0.3)
            prompt = cls.renderer.prompt_tokens(body["messages"])
            verdict = max(VERDICTS, key=lambda text: cls._log_likelihood(prompt, cls.renderer.encode(text)))
        finally:
            with cls.lock:
                cls.in_flight -= 1
        self._reply(200, {"choices": [{"message": {"role": "assistant", "content": verdict}}]})

    @classmethod
    def _log_likelihood(cls, prompt: list[int], reply: list[int]) -> float:
        """The judge model's log-probability of ``reply`` after ``prompt``.

        The endpoint answers with the most likely well-formed verdict (constrained decoding): free decoding of the
        tiny model mistypes "Score" on replies unlike its training data, even greedily, which made this test flaky.
        """
        import tinker

        logprobs = cls.sampler.compute_logprobs(tinker.types.ModelInput.from_ints(prompt + reply)).result()
        return sum(logprobs[len(prompt):])

    def _reply(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        """Quiet."""


@pytest.fixture
def endpoint(judge_model):
    config, root, path = judge_model
    sampler = create_local_service(config, root).create_sampling_client(model_path=path).result()
    _Endpoint.sampler, _Endpoint.renderer, _Endpoint.peak = sampler, Renderer(sampler.get_tokenizer()), 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_an_openai_compatible_judge_is_bounded_and_counts_failures(endpoint, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    judge = LLMJudge(question=QUESTION, model="local-judge", base_url=endpoint, api_key_env="JUDGE_KEY", max_concurrency=3)
    ctx = Context(sampler=None, tokenizer=None, service=None, renderer=None, base_model="minds-tiny")
    states = [{} for _ in range(8)]
    replies = [f"reply {i}" for i in range(7)] + ["FAIL please"]

    async def score() -> list:
        return await asyncio.gather(*(judge("Write a's", r, s, ctx) for r, s in zip(replies, states)))

    assert asyncio.run(score()) == [0.7] * 7 + [None]
    assert _Endpoint.peak == 3  # never more than max_concurrency requests at once
    assert judge.failures == 1 and states[-1]["metrics"] == {"judge/calls": 1.0, "judge/failed": 1.0}
    assert ("Write a's", "FAIL please") not in judge.cache  # a failure is retried next time, not cached
    monkeypatch.setenv("JUDGE_KEY", "wrong")
    assert asyncio.run(judge("Write a's", "new reply", {}, ctx)) is None  # HTTP 401: a failure, not a 0


@pytest.mark.slow
def test_a_judge_from_config_rewards_a_run_and_keeps_its_key_out(endpoint, plugins, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    path = tmp_path / "run.yaml"
    path.write_text(
        "env:\n  id: toy_char_share\n  rewards:\n    - name: minds.judge\n"
        f"      args: {{question: '{QUESTION}', model: local-judge, base_url: '{endpoint}', api_key_env: JUDGE_KEY, max_concurrency: 4}}\n"
    )
    config = load_config(path, ["sampling.max_tokens=6", "trainer.group_size=2", "trainer.groups_per_batch=2", "trainer.steps=1",
                                "metrics.sinks=[]", f"runs_dir={tmp_path}", "name=run"])
    train(config, plugins=plugins)
    (row,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert row["reward/mean"] == pytest.approx(0.7) and row["env/toy_char_share/reward/minds.judge"] == pytest.approx(0.7)
    assert row["env/toy_char_share/judge/calls"] + row.get("env/toy_char_share/judge/cached", 0) == 1.0
    written = "".join(p.read_text() for p in (tmp_path / "run").iterdir() if p.is_file())
    assert KEY not in written + capsys.readouterr().err


def test_bad_judge_args_are_config_errors(plugins, tmp_path, monkeypatch):
    monkeypatch.delenv("NO_SUCH_JUDGE_KEY", raising=False)
    for args, message in (("{model: x}", r"reward 'minds.judge': bad args \['model'\]"),
                          ("{question: q, base_url: 'http://127.0.0.1:9'}", "base_url needs args.model"),
                          ("{question: q, model: m, base_url: 'http://127.0.0.1:9', api_key_env: NO_SUCH_JUDGE_KEY}", "'NO_SUCH_JUDGE_KEY', which is not set")):
        config = load_config(None, ["env.id=toy_char_share", f"env.extra_rewards=[{{name: minds.judge, args: {args}}}]", f"runs_dir={tmp_path}"])
        with pytest.raises(ConfigError, match=message):
            train(config, plugins=plugins)
