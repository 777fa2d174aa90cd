"""The run's model as tinker-cookbook's tokenizer and renderer helpers see it.

A cookbook environment builds its own prompts: its dataset builder calls
``tokenizer_utils.get_tokenizer(model_name)`` and ``renderers.get_renderer(renderer_name, tokenizer)``.
Before one is built, the session names the run's model (``use_run_model``); the model's tokenizer is
then registered with the cookbook under its name (so ``get_tokenizer("minds-tiny")`` answers
offline, as any local model directory does), and a builder's ``model_name`` /
``model_name_for_tokenizer`` / ``renderer_name`` fields that ``[env.args]`` leave out are filled
with the run's model and the cookbook renderer that renders exactly as the model's own chat template.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

import attrs

from minds_core.base.errors import ConfigError
from minds_core.base.logs import get_logger

log = get_logger("cookbook")

#: Builder fields that name the model whose tokenizer the environment renders with.
MODEL_FIELDS = ("model_name_for_tokenizer", "model_name", "base_model")
#: The builder field that names the cookbook renderer.
RENDERER_FIELD = "renderer_name"
#: Cookbook renderers tried, in order, for a model the cookbook does not know: the first whose prompts
#: equal the model's own chat template's is the model's.
CANDIDATE_RENDERERS = ("qwen3_instruct", "qwen3", "llama3", "deepseekv3", "role_colon")
#: The conversation both are rendered with to compare them (a system prompt, two user turns, a reply).
PROBE = (
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is 4 + 5?"},
    {"role": "assistant", "content": "9"},
    {"role": "user", "content": "And 2 + 2?"},
)


@attrs.frozen
class RunModel:
    """The model a run trains, as a cookbook environment needs it."""

    name: str  #: ``model.base_model``
    load_tokenizer: Callable[[], Any]  #: loads its tokenizer (what the run's own renderer uses)


_run_model: RunModel | None = None


def use_run_model(name: str, load_tokenizer: Callable[[], Any]) -> None:
    """Name the run's model before its environments load (the session and each Ray worker call this)."""
    global _run_model
    _run_model = RunModel(name, functools.cache(load_tokenizer))


def run_model() -> RunModel | None:
    """The run's model, when one was named."""
    return _run_model


def register_tokenizer() -> None:
    """Register the run's tokenizer with the cookbook under the model's name (nothing without a run model)."""
    if _run_model is None or importlib.util.find_spec("tinker_cookbook") is None:
        return
    from tinker_cookbook import tokenizer_utils

    tokenizer_utils.register_tokenizer(_run_model.name, _run_model.load_tokenizer)


def builder_fields(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword parameters a builder class (chz or not) is made with."""
    try:
        return dict(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        return {}


def left_to_the_run(loader: Any, args: dict[str, Any]) -> list[str]:
    """The fields of a cookbook builder class that ``args`` leave out and the run's model fills (none for other loaders)."""
    from minds_core.envs.cookbook.sources import cookbook_kind

    if not isinstance(loader, type) or cookbook_kind(loader) is None:
        return []
    fields = builder_fields(loader)
    return [f for f in (*MODEL_FIELDS, RENDERER_FIELD) if f in fields and f not in args]


def filled_args(label: str, cls: type, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` plus, for a builder class, the model and renderer fields left out, taken from the run's model."""
    fields = builder_fields(cls)
    filled = dict(args)
    missing_model = [f for f in MODEL_FIELDS if f in fields and f not in args]
    if missing_model or (RENDERER_FIELD in fields and RENDERER_FIELD not in args):
        model = _run_model
        if model is None:
            raise ConfigError(f"environment {label}: {cls.__name__} needs the run's model, which was not named; set env.args")
        for name in missing_model:
            filled[name] = model.name
        if RENDERER_FIELD in fields and RENDERER_FIELD not in args:
            filled[RENDERER_FIELD] = renderer_for(label, model)
    if isinstance(args.get(RENDERER_FIELD), str):
        check_renderer(label, args[RENDERER_FIELD])
    return filled


def renderer_for(label: str, model: RunModel) -> str:
    """The cookbook renderer of ``model``: the cookbook's recommendation for a model it knows, else the first of
    ``CANDIDATE_RENDERERS`` rendering ``PROBE`` token for token as the model's chat template does."""
    from tinker_cookbook import model_info, renderers

    try:
        return model_info.get_recommended_renderer_name(model.name)
    except Exception:  # noqa: BLE001 - a model the cookbook does not know: found by its template instead
        pass
    tokenizer = model.load_tokenizer()
    try:
        want = list(_template_tokens(tokenizer))
    except Exception as exc:  # noqa: BLE001 - reported as what to change
        raise ConfigError(
            f"environment {label}: the model {model.name!r} has no chat template minds can render ({type(exc).__name__}: {exc}), "
            f"so no cookbook renderer can be matched to it; set env.args.{RENDERER_FIELD}"
        ) from None
    tried = []
    for name in CANDIDATE_RENDERERS:
        try:
            got = renderers.get_renderer(name, tokenizer).build_generation_prompt(list(PROBE)).to_ints()
        except Exception:  # noqa: BLE001 - a renderer that cannot serve this tokenizer is no match
            got = None
        if got == want:
            log.info("cookbook renderer picked for the run's model", model=model.name, renderer=name)
            return name
        tried.append(name)
    raise ConfigError(
        f"environment {label}: tinker-cookbook has no renderer for the model {model.name!r}: it does not know the model, "
        f"and none of {', '.join(tried)} renders as its chat template does; set env.args.{RENDERER_FIELD} to a "
        "renderer for it (tinker_cookbook.renderers.register_renderer adds one), or train a model the cookbook knows"
    )


def _template_tokens(tokenizer: Any) -> list[int]:
    rendered = tokenizer.apply_chat_template(list(PROBE), add_generation_prompt=True, tokenize=True)
    return list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)


def check_renderer(label: str, name: str) -> None:
    """A ConfigError, before the environment is built, when the cookbook renderer ``name`` cannot render for the run's model."""
    if _run_model is None:
        return
    from tinker_cookbook import renderers

    tokenizer = _run_model.load_tokenizer()
    try:
        rendered = renderers.get_renderer(name, tokenizer).build_generation_prompt(list(PROBE)).to_ints()
    except Exception as exc:  # noqa: BLE001 - reported as what to change
        raise ConfigError(
            f"environment {label}: the tinker-cookbook renderer {name!r} (env.args.{RENDERER_FIELD}) cannot render for the "
            f"model {_run_model.name!r}: {type(exc).__name__}: {str(exc)[:300]}; leave {RENDERER_FIELD} out to have minds "
            f"pick the renderer matching the model's chat template, or give one such as {', '.join(CANDIDATE_RENDERERS)}"
        ) from None
    try:
        matches = rendered == _template_tokens(tokenizer)
    except Exception:  # noqa: BLE001 - a model without a usable template: nothing to compare with
        return
    if not matches:
        log.warning(
            "the cookbook renderer renders prompts unlike the model's own chat template; the policy is trained on "
            f"what it renders (leave {RENDERER_FIELD} out to have minds pick a matching one)",
            renderer=name, model=_run_model.name,
        )  # fmt: skip
