"""The models ``minds serve``'s inference routes answer for: its base models and its clients' checkpoints.

A request's ``model`` is a base model the server was started with, or a ``tinker://`` path of
sampler weights the caller may see (the Tinker routes' ownership rules). Samplers of paths are kept
(a few, most recently used) so that an agent's many calls do not reload them.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Any

from minds_core.envs.render import Renderer, TemplateError
from minds_core.http.errors import HttpError
from minds_core.inference.errors import ApiError, unknown_model
from minds_core.inference.sampling import Policy

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["ServedModels"]

#: Samplers of checkpoint paths kept at once (each holds its adapted weights).
KEPT_PATHS = 4


class ServedModels:
    """``Models`` of an ``Engine``: base models by name, checkpoints by ``tinker://`` path."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._renderers: dict[str, Renderer] = {}
        self._bases: dict[str, Any] = {}
        self._paths: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._context: dict[str, int | None] | None = None

    def names(self) -> list[str]:
        return list(self.engine.models)

    def policy(self, model: Any, caller: str) -> Policy:
        if not isinstance(model, str) or not model:
            raise ApiError(400, "model must be a string: a served model's name (GET /v1/models) or a tinker:// path", "model")
        if model.startswith("tinker://"):
            sampler, base = self._path_sampler(model, caller)
        elif model in self.engine.models:
            sampler, base = self._base_sampler(model), model
        else:
            raise unknown_model(model, self.names())
        return Policy(sampler, self._renderer(base, sampler), model, context_length=self._context_length(base))

    def _base_sampler(self, name: str) -> Any:
        with self._lock:
            if name not in self._bases:
                self._bases[name] = self.engine.service.create_sampling_client(base_model=name).result()
            return self._bases[name]

    def _path_sampler(self, path: str, caller: str) -> tuple[Any, str]:
        try:
            base = self.engine.weights_info(path, caller).base_model  # 404 unless the caller's
        except HttpError as exc:
            raise ApiError(
                exc.status, self.engine.public(exc.detail), "model", "model_not_found" if exc.status == 404 else None
            ) from None
        if base not in self.engine.models:
            raise ApiError(
                400,
                f"{path} is an adapter of {base!r}, which this server does not serve (restart it with --model {base})",
                "model",
            )
        with self._lock:
            if path in self._paths:
                self._paths.move_to_end(path)
                return self._paths[path], base
        try:
            sampler = self.engine.service.create_sampling_client(model_path=path).result()
        except Exception as exc:  # noqa: BLE001 - a checkpoint that cannot be loaded is the request's failure
            raise ApiError(
                400, self.engine.public(f"{path} cannot be sampled: {getattr(exc, 'message', exc)}"), "model"
            ) from None
        with self._lock:
            self._paths[path] = sampler
            while len(self._paths) > KEPT_PATHS:
                self._paths.popitem(last=False)
        return sampler, base

    def _renderer(self, base: str, sampler: Any) -> Renderer:
        with self._lock:
            if base not in self._renderers:
                try:
                    self._renderers[base] = Renderer(sampler.get_tokenizer())
                except TemplateError as exc:
                    raise ApiError(400, f"{base!r} cannot be served on the inference routes: {exc}", "model") from None
            return self._renderers[base]

    def _context_length(self, base: str) -> int | None:
        if self._context is None:
            self._context = {m.model_name: m.max_context_length for m in self.engine.capabilities().supported_models}
        return self._context.get(base)
