"""A third party's backend, for the core's tests: the local backend under the name ``wrapped``.

It registers through the ``minds`` entry point as an installed plugin does. Its
services say (one log event) how each was closed, and it exports a checkpoint
by asking the local backend for the files, as a plugin backend over any store would.
"""

from minds_core import get_logger, hookimpl
from minds_core.backends import LocalBackend  # internal on purpose: this fixture wraps the built-in backend

log = get_logger("wrapped_backend")


class ReportedClosing:
    """The local service; ``close`` logs the status the command ended with."""

    def __init__(self, service):
        self.inner = service

    def close(self, status, detail=None):
        log.info("wrapped service closed", status=status)
        return self.inner.close(status)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class WrappedBackend:
    def __init__(self):
        self.local = LocalBackend()

    def __call__(self, config, run_dir):
        return ReportedClosing(self.local(config, run_dir))

    def export_adapter(self, config, service, checkpoint, out_dir):
        log.info("wrapped export", checkpoint=checkpoint)
        return self.local.export_adapter(config, service.inner, checkpoint, out_dir)


@hookimpl
def minds_register_backends(register):
    register("wrapped", WrappedBackend(), "the local backend under another name (a test fixture)")
