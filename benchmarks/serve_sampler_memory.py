"""Memory the ``minds serve`` engine holds over an RL loop: the sampling clients it keeps, step by step.

Run: ``python benchmarks/serve_sampler_memory.py`` (``--steps 20``; ``--sampler-memory-gib G`` and
``--max-samplers N``: the server's flags; ``--smoke``: 3 short steps). The engine and its HTTP server run
in this process, on the CPU with the tiny model; an unmodified ``tinker.ServiceClient`` takes
``serve_overhead.py``'s RL step over HTTP (a new sampling client each step, as
``save_weights_and_get_sampling_client`` makes it, then sampling, ``importance_sampling`` and AdamW).

After each step, counted from the objects alive (``gc``), not from the engine's own accounting:

* local ``SamplingClient`` objects alive (those the engine keeps, and any a request still holds);
* bytes of every live tensor's storage but the base model's (the samplers' adapted weights, decode
  buffers and tables, and the training run's adapter and optimizer state, which stay the same);
* the process's resident set (VmRSS; the SDK client's share included).

Printed: those at some steps, and at the last one, with the engine's own count of the kept clients'
bytes (``KeptSamplers.held_bytes``) beside them.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np
import tinker
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_overhead import Shape, rl_step

from minds_core.backends.local import DEFAULT_BASE_MODEL, SamplingClient, ServiceClient
from minds_core.backends.local.sampling.held_bytes import storage_bytes
from minds_core.http.limits import ServeLimits
from minds_core.serve.engine import Engine
from minds_core.serve.http import TinkerServer
from minds_core.serve.listener import listen
from minds_core.serve.samplers import SamplerBudget

SHAPE = Shape("RL step", prompts=4, group=8, max_tokens=32, prompt_tokens=64, target=None, rank=8)
SMOKE_SHAPE = Shape("smoke", prompts=2, group=2, max_tokens=4, prompt_tokens=12, target=None, rank=4)


def resident_bytes() -> int:
    """This process's resident set, in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS in /proc/self/status: this benchmark reads Linux's")


def live(base: torch.nn.Module) -> tuple[int, int]:
    """Local sampling clients alive, and bytes of live tensors' storages other than ``base``'s."""
    gc.collect()
    with warnings.catch_warnings():  # isinstance() on torch's deprecated module attributes warns
        warnings.simplefilter("ignore", FutureWarning)
        objects = gc.get_objects()
        clients = sum(isinstance(o, SamplingClient) for o in objects)
        tensors = [o for o in objects if type(o) in (torch.Tensor, torch.nn.Parameter)]  # not compile's fakes
    return clients, storage_bytes(tensors, shared=[*base.parameters(), *base.buffers()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="3 short steps")
    parser.add_argument("--sampler-memory-gib", type=float, help="the server's --sampler-memory-gib")
    parser.add_argument("--max-samplers", type=int, help="the server's --max-samplers")
    args = parser.parse_args()
    shape, steps = (SMOKE_SHAPE, 3) if args.smoke else (SHAPE, args.steps)
    given = {"sampler_memory_gib": args.sampler_memory_gib, "max_samplers": args.max_samplers}
    budget = SamplerBudget(**{key: value for key, value in given.items() if value is not None})
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(3, 250, size=shape.prompt_tokens)] for _ in range(shape.prompts)]
    with tempfile.TemporaryDirectory() as tmp, ServiceClient(checkpoint_root=tmp, device="cpu") as local:
        local.create_sampling_client(base_model=DEFAULT_BASE_MODEL).result()  # loaded, as serve() does
        engine = Engine(local, [DEFAULT_BASE_MODEL], ServeLimits(), budget)
        server = TinkerServer(listen("127.0.0.1", 0, 128), engine, (), ServeLimits())
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = local._runtime.models.get(DEFAULT_BASE_MODEL).model  # to leave its weights out of the count
        remote = tinker.ServiceClient(base_url=f"http://127.0.0.1:{server.server_address[1]}", api_key="tml-bench")
        trainer = remote.create_lora_training_client(DEFAULT_BASE_MODEL, rank=shape.rank, seed=0).result()
        print(f"minds serve engine, tiny model on the CPU, {steps} RL steps ({shape.prompts} prompts x {shape.group} "
              f"samples x {shape.max_tokens} tokens); {budget}")  # fmt: skip
        print("step  clients alive  tensor MiB (not the base's)  RSS MiB  kept clients' MiB (engine)")
        rows = []
        for step in range(steps):
            rl_step(trainer, prompts, shape, step)
            clients, held = live(base)
            rows.append((clients, held, resident_bytes()))
            if step + 1 in (1, 2, 5, 10, 15, steps):
                kept = engine.samplers.held_bytes()
                print(f"{step + 1:4d}  {clients:13d}  {held / 2**20:27.2f}  {rows[-1][2] / 2**20:7.0f}  {kept / 2**20:27.2f}")
        print(f"peak over the steps: {max(r[0] for r in rows)} clients alive, {max(r[1] for r in rows) / 2**20:.2f} MiB "
              f"of tensors, {max(r[2] for r in rows) / 2**20:.0f} MiB resident")  # fmt: skip
        remote.close("success").result()
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
