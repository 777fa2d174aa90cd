"""The one door to a training service: how every command that talks to one opens and closes it.

``ServiceLifetime.choose`` picks the backend from the registry (``backend =
"auto"`` asks every registered backend, and the choice is logged) before
anything is built; ``open`` calls the backend's factory (awaiting a connection
check when it returns one). Used as ``async with`` (RL, eval, SFT) or ``with``
(sample, chat, export, which call the service's futures synchronously), the
lifetime closes the service when the command ends, however it ends, telling it
``success``, ``errored`` or ``interrupted``. In between it sends requests with
the run's retries (``call``), turns Ctrl-C/SIGTERM into a request to stop
after the step in flight (``stop_on_signal``), and asks the backend for a
checkpoint's adapter files (``export_adapter``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

import attrs
import tinker

from minds_core.backends import backend_settings, choose_backend, rest_client
from minds_core.backends.retry import REJECTIONS, Backoff, ServiceCallError, ServiceLost, call_service
from minds_core.base.errors import MindsError, UsageError
from minds_core.base.interrupt import RunInterrupted, StopOnSignal
from minds_core.base.logs import get_logger
from minds_core.config import RunConfig
from minds_core.contract.names import check_names
from minds_core.contract.plugin_errors import error_text, raised_by_plugin
from minds_core.contract.rubric import maybe_await
from minds_core.training.run_directory import default_run_name

if TYPE_CHECKING:
    from minds_core.contract.plugins import Registry

T = TypeVar("T")
log = get_logger("service")

#: How often a command without an event loop looks up from a wait on the service to see whether it is lost.
_WAIT_SLICE_SECONDS = 0.5


def exit_status(error: BaseException | None) -> str:
    """How a command ended, as the service session records it."""
    if error is None:
        return "success"
    if isinstance(error, (KeyboardInterrupt, asyncio.CancelledError, RunInterrupted)):
        return "interrupted"
    return "errored"


@attrs.define
class ServiceLifetime:
    """One command's training service: the backend chosen, the service once open, its retries and signals."""

    config: RunConfig  #: the command's config, its ``backend`` the one chosen (never ``auto``)
    backend: str  #: the registered name of the backend
    factory: Any  #: the registered ``BackendFactory``
    backoff: Backoff = attrs.field(factory=Backoff)  #: how transient service failures are retried
    service: Any = None  #: the service client, once ``open``
    _stop: StopOnSignal | None = None
    _closed: bool = False
    _watching: _WatchThread | None = None

    @classmethod
    def choose(cls, config: RunConfig, registry: Registry) -> ServiceLifetime:
        """The backend the config names, or the one ``auto`` picks (logged with why); nothing is opened yet."""
        choice = choose_backend(config, registry)
        factory = registry.lookup("backends", choice.name, "backend").obj
        log.info("backend chosen", backend=choice.name, reason=choice.reason, **backend_settings(config, choice.name))
        if config.backend == "auto":
            config = attrs.evolve(config, backend=choice.name)  # a run's config.yaml and report name the backend used
        return cls(config, choice.name, factory)

    @classmethod
    def for_run(cls, config: RunConfig, registry: Registry, resume_dir: Path | None) -> ServiceLifetime:
        """``choose`` for a run that trains: named after ``resume_dir`` when resuming, else given a default name when
        it has none, and its registered names checked first."""
        if resume_dir is not None:
            config = attrs.evolve(config, name=resume_dir.name, runs_dir=str(resume_dir.parent))
        elif not config.name:
            config = attrs.evolve(config, name=default_run_name(config))
        check_names(config, registry)
        return cls.choose(config, registry)

    async def open(self, run_dir: Path | None = None, watched: bool = True) -> Self:
        """Make the service (``run_dir``: the run's folder, default ``<runs_dir>/<name>``); a backend may check its connection.

        ``watched``: a backend that can (``watch``) keeps checking that the service answers while this loop runs."""
        if self.service is None:
            run_dir = run_dir or Path(self.config.runs_dir) / (self.config.name or "_adhoc")
            self.service = await maybe_await(self.factory(self.config, run_dir))
            watch = getattr(self.factory, "watch", None)  # a backend may watch that its service still answers
            if watched and callable(watch):
                self.backoff = attrs.evolve(self.backoff, watch=watch(self.config))
        return self

    async def close(self, error: BaseException | None = None) -> None:
        """Give the signals back and end the service session (once); a failure to close is only logged."""
        if self._stop is not None:
            self._stop.restore()
        watch = self.backoff.watch
        if watch is not None:
            watch.stop()
        if self._closed or self.service is None:
            return
        self._closed = True
        if watch is not None and watch.lost:  # the SDK would retry its goodbye to a service that is gone for minutes
            log.warning("not closing the service session: the service is gone", why=watch.lost)
            return
        close = getattr(self.service, "close", None)
        if not callable(close):
            return
        try:
            done = await maybe_await(close(exit_status(error)))
            if callable(getattr(done, "result", None)):  # a future the SDK returns without awaiting it
                done.result()
        except BaseException as exc:  # closing never hides the command's own outcome, nor sets its exit code
            if not raised_by_plugin(exc):
                raise
            log.warning("closing the service failed", backend=self.backend, error=error_text(exc))

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        await self.close(error)

    def __enter__(self) -> Self:
        """For commands without an event loop of their own (sample, chat, export): the backend's watch (``watch``)
        runs on a thread of its own, read by ``result``."""
        asyncio.run(self.open(watched=False))
        watch = getattr(self.factory, "watch", None)
        if callable(watch):
            self._watching = _WatchThread(lambda: watch(self.config))
            self.backoff = attrs.evolve(self.backoff, watch=self._watching.watch)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._watching is not None:
            self._watching.stop()
        asyncio.run(self.close(error))

    def result(self, future: Any, where: str, request: str) -> Any:
        """An SDK future's result, in a command without an event loop (``with``); a ``ServiceCallError`` naming
        ``where`` and ``request`` once the service stops answering (the SDK alone retries for many minutes)."""
        watch = self.backoff.watch
        while True:
            try:
                return future.result(timeout=None if watch is None else _WAIT_SLICE_SECONDS)
            except TimeoutError:
                if watch.lost:
                    raise ServiceCallError(where, request, ServiceLost(watch.lost), 1) from None

    def _watched(self, work: Callable[[], T], where: str) -> T:
        """``work()``, which waits on the SDK's futures itself (a backend's export); with a watch, on a thread of its
        own, so that a lost service ends the wait (``result``) while the SDK still retries."""
        if self.backoff.watch is None:
            return work()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(work())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
                done.set_exception(exc)

        threading.Thread(target=run, daemon=True, name="minds-watched").start()  # daemon: a lost service's wait ends the command
        return self.result(done, where, "its requests")

    async def call(self, where: str, request: str, send: Callable[[], Awaitable[T]]) -> T:
        """``send()``'s result, transient failures retried (``ServiceCallError`` when it fails for good)."""
        result, _ = await call_service(where, request, send, self.backoff)
        return result

    async def start_training(self, state_path: str | None, with_optimizer: bool) -> Any:
        """A training client: a new LoRA adapter on the config's model, or one restored from ``state_path``.

        A rejected request (bad model, key or checkpoint) or a service that stopped answering is a UsageError.
        """
        cfg = self.config
        try:  # the hosted SDK starts its session (and may fail) when the first client is requested
            if state_path and with_optimizer:
                return await self.service.create_training_client_from_state_with_optimizer(state_path)
            if state_path:
                return await self.service.create_training_client_from_state(state_path)
            return await self.service.create_lora_training_client(
                base_model=cfg.model.base_model, rank=cfg.model.lora_rank, seed=cfg.seed, train_unembed=cfg.model.train_unembed
            )
        except REJECTIONS as exc:
            raise self.cannot_start_training(state_path, exc) from None
        except tinker.APIConnectionError as exc:
            raise UsageError(f"cannot start training on {cfg.model.base_model!r}: the service stopped answering ({exc})") from None

    def cannot_start_training(self, state_path: str | None, why: BaseException) -> UsageError:
        """The error for a training client that the service (or its tokenizer) refused: where training was to start
        (``state_path``, else the config's base model) and why."""
        start = f"from {state_path}" if state_path else f"on {self.config.model.base_model!r}"
        return UsageError(f"cannot start training {start}: {why}")

    def rest_client(self) -> Any:
        """The service's ``RestClient`` (checkpoints: list, info, delete)."""
        return rest_client(self.service)

    def stop_on_signal(self, resume_hint: str) -> StopOnSignal:
        """From now until ``restore`` (or ``close``), SIGINT/SIGTERM ask the loop to stop after its step (call on the loop)."""
        self._stop = StopOnSignal(resume_hint)
        self._stop.install()
        return self._stop

    def export_adapter(self, checkpoint: str, out_dir: Path) -> str:
        """Write ``checkpoint``'s adapter as a PEFT folder into ``out_dir`` (the backend reads it); its base model's name."""
        export = getattr(self.factory, "export_adapter", None)
        if not callable(export):
            raise UsageError(
                f"backend {self.backend!r} cannot export checkpoints (its factory has no export_adapter); "
                "sample from the checkpoint with minds sample, or ask the backend's author for export_adapter"
            )
        try:
            return self._watched(lambda: export(self.config, self.service, checkpoint, out_dir), f"export of {checkpoint}")
        except (MindsError, OSError):  # a clear message already, or a file error the command reports
            raise
        except Exception as exc:
            if not raised_by_plugin(exc):
                raise
            raise MindsError(f"backend {self.backend!r} failed to export {checkpoint}: {error_text(exc)}") from exc


class _WatchThread:
    """A backend's service watch (``make()``: it needs a running loop; None: no watch) on an event loop of its own
    thread, for a command whose own thread waits on the SDK's futures."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._done: asyncio.Event | None = None
        self.watch: Any = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._run(make),), daemon=True,
                                        name="minds-service-watch")  # fmt: skip
        self._thread.start()
        self._started.wait()

    async def _run(self, make: Callable[[], Any]) -> None:
        self._done = asyncio.Event()
        try:
            self.watch = make()
        finally:
            self._started.set()
        await self._done.wait()
        if self.watch is not None:
            self.watch.stop()

    def stop(self) -> None:
        if self._done is not None:
            self._loop.call_soon_threadsafe(self._done.set)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()
