"""minds-plugin-ray: ``[rollout] executor = "ray"`` runs episodes as Ray tasks on any node of a Ray cluster."""

from __future__ import annotations

from typing import Any

from minds_core import Register, hookimpl


async def start_ray_executor(session: Any) -> Any:
    """The ``ray`` ExecutorFactory: connects to the cluster of ``[ray] address`` (imports Ray only now)."""
    from minds_ray.executor import RayExecutor

    return await RayExecutor.start(session)


@hookimpl
def minds_register_rollout_executors(register: Register) -> None:
    register("ray", start_ray_executor, "episodes as Ray tasks on a Ray cluster ([ray] address, num_cpus, resources, max_in_flight)")
