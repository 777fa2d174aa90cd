"""The report page: one self-contained HTML document from a run's files (no script, no network)."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from html import escape
from typing import Any

import attrs

from minds_core.report.charts import Series, line_chart, stacked_chart
from minds_core.training.pacing import PARTS

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#212529;background:#f8f9fa}
header{background:#212529;color:#f8f9fa;padding:14px 24px}header h1{margin:0 0 4px;font-size:20px}
header .meta{color:#ced4da;font-size:13px}main{padding:12px 24px 40px}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #dee2e6;padding-bottom:4px}
.grid{display:flex;flex-wrap:wrap;gap:14px}figure{margin:0;background:#fff;border:1px solid #dee2e6;border-radius:6px;padding:8px}
figcaption{font-weight:600;margin-bottom:4px}.tick{font-size:11px;fill:#495057}.axis{font-size:11px;fill:#868e96}
.legend{font-size:12px;max-width:560px}.key{margin-right:12px;white-space:nowrap}
.key i{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
table{border-collapse:collapse;background:#fff}table.rollouts{width:100%}td,th{border:1px solid #dee2e6;padding:4px 8px;vertical-align:top;text-align:left}
th{background:#f1f3f5}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{background:#fff;border:1px solid #dee2e6;border-radius:6px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:20px}.card span{color:#868e96;font-size:12px}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
.browser{max-height:75vh;overflow:auto;border:1px solid #dee2e6;border-radius:6px;padding:4px 8px;background:#fdfdfe}
.group{background:#fff;border:1px solid #dee2e6;border-radius:6px;padding:8px;margin:8px 0}
.msg{white-space:pre-wrap;word-break:break-word;border-left:3px solid #adb5bd;padding:3px 8px;margin:3px 0;
font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
.role{font:600 11px system-ui,sans-serif;text-transform:uppercase;color:#868e96;display:block}
.msg.system{border-color:#868e96;background:#f8f9fa}.msg.user{border-color:#1f5fd6;background:#eef4ff}
.msg.assistant{border-color:#2b8a3e;background:#effaf1}.msg.tool{border-color:#e8590c;background:#fff4e6}
.toolcall{display:block;border:1px dashed #9c36b5;background:#f8f0fc;padding:2px 6px;margin:3px 0}
.think{display:block;color:#868e96;font-style:italic}.error{color:#c92a2a}.note{color:#868e96}
.notes{background:#fff9db;border:1px solid #fcc419;border-radius:6px;padding:6px 14px;margin-top:12px}.notes ul{margin:4px 0}
.pos{color:#2b8a3e}.neg{color:#c92a2a}
"""


#: C0 control characters (but tab and newline) shown as their Unicode control pictures.
_CONTROLS = {code: 0x2400 + code for code in range(32) if chr(code) not in "\t\n"} | {0x7F: 0x2421}


def printable(text: str) -> str:
    """``text`` with control characters made visible (a sampled reply may hold any byte, escape codes too)."""
    return text.translate(_CONTROLS)


@attrs.frozen
class RunData:
    """What the report shows: the run's config, its metric rows (one per step) and its sampled rollouts."""

    name: str
    config: dict[str, Any]
    config_text: str
    metrics: list[dict[str, Any]]
    rollouts: list[dict[str, Any]]
    status: str
    #: what of the run's files is not as minds writes it, left out (``3 line(s) of rollouts.jsonl ...``)
    left_out: list[str] = attrs.field(factory=list)
    #: the run's trace file name (None: it wrote none) and its slowest spans (``report.timing.slowest``)
    trace: str | None = None
    slowest: dict[str, list[dict[str, Any]]] = attrs.field(factory=dict)


def render(run: RunData) -> str:
    """The whole HTML document."""
    rows = run.metrics
    body = [_header(run), _cards(run), _notes(rows), _left_out(run.left_out)]
    if not rows:
        body.append('<p class="note">No step has finished yet; the report fills in as the run writes metrics.jsonl.</p>')
    for title, charts in _chart_sections(rows):
        drawn = [c for c in charts if c]
        if drawn:
            body.append(f'<h2>{escape(title)}</h2><div class="grid">{"".join(drawn)}</div>')
        if title == "Reward" and not _is_sft(run):  # SFT samples nothing: no rollouts to show
            body.append(_rollouts(run.rollouts))
        if title == "Health":
            body.append(_time_section(run))
    if rows:
        body.append(_last_metrics(rows[-1]))
    body.append(f"<h2>Config</h2><details><summary>config.yaml (secrets redacted)</summary><pre>{escape(run.config_text)}</pre></details>")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>minds report: {escape(run.name)}</title><style>{STYLE}</style></head>"
        f'<body>{body[0]}<main>{"".join(body[1:])}</main></body></html>\n'
    )


def table(config: dict[str, Any], key: str) -> dict[str, Any]:
    """The table ``config[key]``; empty when it is missing or not a table (a hand-edited config.yaml)."""
    value = config.get(key)
    return value if isinstance(value, dict) else {}


def _header(run: RunData) -> str:
    cfg = run.config
    listed = cfg.get("envs") if isinstance(cfg.get("envs"), list) else []
    envs = [str(e.get("id", "?")) if isinstance(e, dict) else str(e) for e in ([cfg["env"]] if cfg.get("env") else []) + listed]
    model = table(cfg, "model").get("base_model", "?")
    trainer = table(cfg, "trainer")
    meta = (
        f"environments: {', '.join(envs) or '?'} · model: {model} · backend: {cfg.get('backend', '?')} · "
        f"loss: {trainer.get('loss_fn', '?')} · status: {run.status} · written {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}"
    )
    return f'<header><h1>minds run {escape(run.name)}</h1><div class="meta">{escape(meta)}</div></header>'


def _is_sft(run: RunData) -> bool:
    return table(run.config, "trainer").get("mode") == "sft"


def _cards(run: RunData) -> str:
    rows = run.metrics
    total = table(run.config, "trainer").get("steps")
    steps = ("steps recorded", f"{len(rows)}" + (f" of {total}" if total else ""))
    train_time = ("train time", f"{sum(r.get('time/step', 0.0) for r in rows):.0f} s")
    if _is_sft(run):
        losses = [r["train/loss"] for r in rows if _number(r.get("train/loss"))]
        held_out = [r["eval/loss"] for r in rows if _number(r.get("eval/loss"))]
        before = next((r["eval/loss_before"] for r in rows if _number(r.get("eval/loss_before"))), None)
        cards = [
            steps,
            ("train loss (first step)", _fmt(losses[0]) if losses else "–"),
            ("train loss (last step)", _fmt(losses[-1]) if losses else "–"),
            ("held-out loss before training", "–" if before is None else _fmt(before)),
            ("held-out loss (last)", _fmt(held_out[-1]) if held_out else "–"),
            train_time,
        ]
    else:
        cards = _rl_cards(rows, steps, train_time)
    return '<div class="cards">' + "".join(f"<div class=card><b>{escape(v)}</b><span>{escape(k)}</span></div>" for k, v in cards) + "</div>"


def _rl_cards(rows: Sequence[dict[str, Any]], steps: tuple[str, str], train_time: tuple[str, str]) -> list[tuple[str, str]]:
    rewards = [r["reward/mean"] for r in rows if _number(r.get("reward/mean"))]
    return [
        steps,
        ("reward (last step)", _fmt(rewards[-1]) if rewards else "–"),
        ("reward (first step)", _fmt(rewards[0]) if rewards else "–"),
        ("best step reward", _fmt(max(rewards)) if rewards else "–"),
        ("failed rollouts", str(int(sum(r.get("rollouts/failed", 0) for r in rows)))),
        ("dropped groups", str(int(sum(r.get("groups/dropped_failures", 0) + r.get("groups/dropped_constant", 0) for r in rows)))),
        train_time,
    ]


#: Steps at the end of the run the health notes look at.
NOTE_WINDOW = 5


def health_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Plain warnings about the last NOTE_WINDOW steps: no learning signal, cut replies, failures, collapse."""
    recent = rows[-NOTE_WINDOW:]

    def mean(key: str) -> float | None:
        values = [float(r[key]) for r in recent if _number(r.get(key))]
        return sum(values) / len(values) if values else None

    span = f"over the last {len(recent)} step{'s' if len(recent) != 1 else ''}"
    notes = []
    if (zero := mean("groups/zero_variance_frac")) is not None and zero >= 0.9:
        notes.append(
            f"{zero:.0%} of groups gave every rollout the same reward {span}: their advantages are 0 and teach nothing. "
            "A larger trainer.group_size, a higher sampling.temperature or a graded reward gives a signal."
        )
    if (cut := mean("stop/length_frac")) is not None and cut >= 0.5:
        notes.append(f"{cut:.0%} of sampled turns stopped at max_tokens {span}: replies are cut off; raise sampling.max_tokens.")
    failed, total = sum(r.get("rollouts/failed", 0) for r in recent), sum(r.get("rollouts/total", 0) for r in recent)
    if total and failed / total >= 0.1:
        notes.append(f"{failed / total:.0%} of rollouts failed {span}; their errors are in the rollout table and train.log.")
    if (surprisal := mean("sampler/neg_logprob")) is not None and surprisal < 0.05:
        notes.append(f"The sampled tokens' mean −logprob is {surprisal:.3f} {span}: the policy is nearly deterministic and explores little.")
    return notes


def _left_out(left_out: Sequence[str]) -> str:
    if not left_out:
        return ""
    items = "".join(f"<li>{escape(what)}</li>" for what in left_out)
    return f'<div class="notes"><b>Left out: not as minds writes them</b><ul>{items}</ul></div>'


def _notes(rows: Sequence[dict[str, Any]]) -> str:
    notes = health_notes(rows)
    if not notes:
        return ""
    return '<div class="notes"><b>Health</b><ul>' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul></div>"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _series(rows: Sequence[dict[str, Any]], key: str, label: str | None = None, low: str | None = None, high: str | None = None) -> Series:
    """The values of ``key`` at the steps that have it; a band from ``low``/``high`` when given."""
    present = [r for r in rows if _number(r.get(key))]
    return Series(
        key=key,
        label=label or key,
        steps=[int(r["step"]) for r in present],
        values=[float(r[key]) for r in present],
        low=[r.get(low) if _number(r.get(low)) else None for r in present] if low else None,
        high=[r.get(high) if _number(r.get(high)) else None for r in present] if high else None,
    )


def _keys(rows: Sequence[dict[str, Any]], pattern: str) -> list[str]:
    """Metric keys matching a regular expression, in first-seen order."""
    seen: dict[str, None] = {}
    compiled = re.compile(pattern)
    for row in rows:
        for key in row:
            if compiled.fullmatch(key) and _number(row[key]):
                seen.setdefault(key, None)
    return list(seen)


def _chart_sections(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    envs = sorted({m.group(1) for k in _keys(rows, r"env/.+/reward_mean") if (m := re.fullmatch(r"env/(.+)/reward_mean", k))})
    reward = [line_chart("Reward per rollout: mean, band min–max", [_series(rows, "reward/mean", "reward", "reward/min", "reward/max")], "reward")]
    if len(envs) > 1:
        reward.append(
            line_chart(
                "Reward per environment",
                [_series(rows, f"env/{e}/reward_mean", e, f"env/{e}/reward_min", f"env/{e}/reward_max") for e in envs],
                "reward",
            )
        )
    for env in envs:
        parts = [k for k in _keys(rows, rf"env/{re.escape(env)}/reward/.+") if not k.endswith(("/min", "/max"))]
        if parts:
            reward.append(
                line_chart(
                    f"Reward components · {env}",
                    [_series(rows, k, k.split("/reward/", 1)[1], f"{k}/min", f"{k}/max") for k in parts],
                    "component",
                )
            )
        own = _keys(rows, rf"env/{re.escape(env)}/(?!reward[_/]|groups$|failed$).+")  # the episodes' own metrics
        reward.append(line_chart(f"Episode metrics (mean) · {env}", [_series(rows, k, k.split("/", 2)[2]) for k in own]))
    tags = [m.group(1) for k in _keys(rows, r"tag/.+/reward_mean") if (m := re.fullmatch(r"tag/(.+)/reward_mean", k))]
    reward.append(line_chart("Reward per task tag (mean)", [_series(rows, f"tag/{t}/reward_mean", t) for t in tags], "reward"))
    training = [
        line_chart("Loss", [_series(rows, k) for k in _keys(rows, r"train/loss.*")]),
        line_chart("KL", [_series(rows, k) for k in _keys(rows, r"kl/.+")], "nats/token"),
        line_chart("Advantage: mean, band min–max", [_series(rows, "advantage/mean", "advantage", "advantage/min", "advantage/max")]),
        line_chart(
            "Top-k distillation KL to the teacher",
            [_series(rows, k, k.removeprefix("distill/")) for k in ("distill/kl", "distill/kl_topk", "distill/kl_tail")],
            "nats/token",
        ),
        line_chart(
            "Top-k distillation: agreement with the teacher, mass its top-k covers",
            [_series(rows, k, k.removeprefix("distill/")) for k in ("distill/agreement", "distill/teacher_mass", "distill/student_mass")],
            "fraction",
        ),
    ]
    health = [
        line_chart("Completion tokens per rollout: mean, band min–max",
                   [_series(rows, "tokens/completion/mean", "tokens", "tokens/completion/min", "tokens/completion/max")], "tokens"),
        line_chart("Shares", [_series(rows, "groups/zero_variance_frac", "groups with zero reward variance"),
                              _series(rows, "stop/length_frac", "turns truncated at max_tokens")], "fraction"),
        line_chart("Sampler entropy proxy: mean −logprob of sampled tokens", [_series(rows, "sampler/neg_logprob", "−logprob")], "nats"),
        line_chart("Stop reasons (sampled turns)", [_series(rows, k, k.removeprefix("stop/")) for k in _keys(rows, r"stop/(?!length_frac$).+")], "turns"),
        line_chart(
            "Failures, timeouts, dropped groups",
            [_series(rows, k) for k in ("rollouts/failed", "rollouts/timed_out", "rollouts/invalid_reward", "rollouts/retried",
                                         "rollouts/truncated", "groups/dropped_failures", "groups/dropped_constant")],
            "count",
        ),
        line_chart(
            "Step time",
            [_series(rows, k, k.removeprefix("time/")) for k in ("time/sample", "time/wait_for_batch", "time/train", "time/save", "time/step")],
            "seconds",
        ),
    ]
    evals: dict[str, list[str]] = {}
    for key in _keys(rows, r"eval/.+"):
        evals.setdefault(key.rsplit("/", 1)[0], []).append(key)
    evaluation = [line_chart(group, [_series(rows, k) for k in keys]) for group, keys in evals.items()]
    return [("Reward", reward), ("Training", training), ("Health", health), ("Evaluation", evaluation)]


def _time_section(run: RunData) -> str:
    """Where the time goes: each step's wall time split into its parts (``phase/*``), the slowest episodes and
    reward calls (from the trace), and a link to the trace file."""
    parts = [k for k in (f"phase/{p}" for p in PARTS) if any(k in row for row in run.metrics)]
    series = [_series(run.metrics, k, k.removeprefix("phase/")) for k in parts]
    chart = stacked_chart("Step time by part (stacked: adds up to the step's wall time)", series, "seconds")
    if not chart and run.trace is None:
        return ""
    out = [f'<h2>Where the time goes</h2><div class="grid">{chart}</div>']
    for kind, title in (("episodes", "Slowest episodes"), ("rewards", "Slowest reward functions and judges")):
        rows = run.slowest.get(kind) or []
        if rows:
            cells = "".join(
                f'<tr><td>{escape(str(r["name"]))}</td><td class="num">{r["seconds"]:.3f}</td><td>{escape(str(r["environment"]))}</td>'
                f'<td>{escape(printable(str(r["task"])))}</td><td class="num">{escape(str(r["step"]))}</td><td>{escape(str(r["error"])[:200])}</td></tr>'
                for r in rows
            )
            out.append(
                f'<h3>{title}</h3><table class="slowest" data-kind="{kind}"><tr><th>span</th><th>seconds</th><th>environment</th>'
                f"<th>task</th><th>step</th><th>error</th></tr>{cells}</table>"
            )
    if run.trace is not None:
        out.append(
            f'<p class="note">Every span of the run: <a class="trace-link" href="{escape(run.trace)}">{escape(run.trace)}</a> '
            "(open it in ui.perfetto.dev or chrome://tracing).</p>"
        )
    return "".join(out)


def _last_metrics(row: dict[str, Any]) -> str:
    cells = "".join(
        f'<tr><td>{escape(k)}</td><td class="num">{escape(_fmt(v))}</td></tr>' for k, v in sorted(row.items()) if k != "step"
    )
    return (
        f'<h2>All metrics</h2><details><summary>every metric of the last step ({escape(str(row.get("step")))})</summary>'
        f'<table class="last-metrics"><tr><th>metric</th><th>value</th></tr>{cells}</table></details>'
    )


def _rollouts(records: Sequence[dict[str, Any]]) -> str:
    if not records:
        return '<h2>Sampled rollouts</h2><p class="note">No rollouts recorded (metrics.rollouts_per_step = 0, or no step yet).</p>'
    by_step: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        by_step.setdefault(int(record.get("step", -1)), []).append(record)
    steps = sorted(by_step, reverse=True)
    sections = []
    for step in steps:
        groups = by_step[step]
        rewards = [r["reward"] for g in groups for r in g.get("rollouts", []) if _number(r.get("reward"))]
        mean = f", mean reward {sum(rewards) / len(rewards):.4g}" if rewards else ""
        opened = " open" if step == steps[0] else ""
        sections.append(
            f'<details class="step" data-step="{step}"{opened}><summary>step {step}: {len(groups)} groups{mean}</summary>'
            + "".join(_group(g) for g in groups)
            + "</details>"
        )
    return '<h2>Sampled rollouts</h2><div class="browser">' + "".join(sections) + "</div>"


def _group(group: dict[str, Any]) -> str:
    prompt = "".join(_message(m) for m in group.get("prompt") or [])
    dropped = f' · <span class="error">dropped: {escape(str(group["dropped"]))}</span>' if group.get("dropped") else ""
    rows = "".join(_rollout_row(i, r) for i, r in enumerate(group.get("rollouts", [])))
    return (
        f'<div class="group"><div><b>{escape(str(group.get("env")))}</b> · task {escape(str(group.get("task") or "–"))}{dropped}</div>'
        f"<details><summary>prompt</summary>{prompt}</details>"
        '<table class="rollouts"><tr><th>#</th><th>reward</th><th>components</th><th>advantage</th><th>conversation</th></tr>'
        f"{rows}</table></div>"
    )


def _rollout_row(index: int, rollout: dict[str, Any]) -> str:
    reward = rollout.get("reward")
    advantage = rollout.get("advantage")
    components = "<br>".join(f"{escape(k)} = {_fmt(v)}" for k, v in (rollout.get("components") or {}).items())
    messages = rollout.get("messages") or [{"role": "assistant", "content": c} for c in rollout.get("completion", [])]
    conversation = "".join(_message(m) for m in messages)
    flags = [label for key, label in (("timed_out", "timed out"), ("truncated", "token/turn budget reached")) if rollout.get(key)]
    if rollout.get("error"):
        conversation += f'<div class="error">error: {escape(printable(str(rollout["error"])))}</div>'
    if flags:
        conversation += f'<div class="note">{escape(", ".join(flags))}</div>'
    sign = "pos" if _number(advantage) and advantage > 0 else "neg" if _number(advantage) and advantage < 0 else ""
    return (
        f'<tr class="rollout"><td class="num">{index}</td><td class="num reward">{"–" if reward is None else escape(_fmt(reward))}</td>'
        f'<td class="components">{components or "–"}</td><td class="num advantage {sign}">{"–" if advantage is None else escape(_fmt(advantage))}</td>'
        f'<td class="conversation">{conversation}</td></tr>'
    )


_MARKUP = re.compile(r"(<tool_call>.*?(?:</tool_call>|$)|<think>.*?(?:</think>|$))", re.DOTALL)


def _message(message: dict[str, Any]) -> str:
    role = str(message.get("role", "?"))
    label = {"tool": "tool result", "user": "user"}.get(role, role)
    if message.get("name"):
        label += f" · {message['name']}"
    extra = []
    if "stop_reason" in message:
        extra.append(f"{message.get('tokens', '?')} tokens, stop: {message['stop_reason']}")
    head = f'<span class="role">{escape(label)}{" · " + escape("; ".join(extra)) if extra else ""}</span>'
    body = []
    for piece in _MARKUP.split(printable(str(message.get("content", "")))):
        if piece.startswith("<tool_call>"):
            body.append(f'<span class="toolcall"><span class="role">tool call</span>{escape(piece)}</span>')
        elif piece.startswith("<think>"):
            body.append(f'<span class="think">{escape(piece)}</span>')
        else:
            body.append(escape(piece))
    for call in message.get("tool_calls") or []:
        body.append(f'<span class="toolcall"><span class="role">tool call</span>{escape(json.dumps(call, default=str))}</span>')
    css = role if role in ("system", "user", "assistant", "tool") else "user"
    return f'<div class="msg {css}">{head}{"".join(body)}</div>'
