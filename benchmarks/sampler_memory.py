"""Peak memory of the local sampler on a ragged decode batch: 32 concurrent one-sample requests.

Run: ``.venv/bin/python benchmarks/sampler_memory.py`` (``--smoke``: shorter replies, seconds).

The shape that once took the sampler to 6 GB and more: 32 one-sample requests sent
together, every prompt of its own length, each reply leaving the batch at its own step
(``max_tokens`` 512 down to 264 by 8). Each shape runs in a child process of its own (peak
RSS is a process's high-water mark), against baselines measured in the same run:

* idle: the same child, before the shape, after loading the model and sampling one token
  (what any sampler costs);
* uniform: the same 32 rows as one 32-sample request of the longest prompt and ``max_tokens``
  (one length for every row: the buffer as it is meant to be used), in a child of its own.

Printed: each peak RSS, and the ragged peak against idle (target <= 1.25x) and against uniform.
``--device cuda`` samples on the GPU and reports its peak memory allocated the same way.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import torch
from tinker import types
from transformers import AutoConfig

from minds_core.backends.local import DEFAULT_BASE_MODEL, ServiceClient
from minds_core.backends.local.model.placement import resolve_placement
from minds_core.backends.local.model.tiny_model import tiny_model_path

ROWS = 32
SHAPES = ("ragged", "uniform")


def requests(smoke: bool) -> list[tuple[list[int], int]]:
    """(prompt, max_tokens) of each of the 32 one-sample requests: prompts of 20 to 144 tokens, replies leaving
    one by one."""
    longest = 64 if smoke else 512
    step = 1 if smoke else 8
    return [([65 + i % 26] * (20 + 4 * i), longest - step * i) for i in range(ROWS)]


def peak_memory(device: str) -> int:
    """The peak memory so far, in bytes: this process's RSS, or on a GPU the memory torch allocated there."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(shape: str, smoke: bool, device: str) -> None:
    """(Child process) sample ``shape``; print the peak memory in bytes before it (idle) and after, as JSON."""
    with ServiceClient(device=device) as service:
        sampler = service.create_sampling_client(base_model=DEFAULT_BASE_MODEL).result()
        params = types.SamplingParams(max_tokens=1, temperature=1.0, seed=0, stop=[])
        sampler.sample(types.ModelInput.from_ints([65] * 8), 1, params).result()
        idle = peak_memory(device)
        asked = requests(smoke)
        if shape == "ragged":
            futures = [
                sampler.sample(types.ModelInput.from_ints(prompt), 1, params.model_copy(update={"max_tokens": most}))
                for prompt, most in asked
            ]
        else:
            prompt, most = max(asked, key=lambda request: len(request[0]) + request[1])
            futures = [sampler.sample(types.ModelInput.from_ints(prompt), ROWS, params.model_copy(update={"max_tokens": most}))]
        tokens = sum(len(sequence.tokens) for future in futures for sequence in future.result().sequences)
    print(json.dumps({"idle": idle, "peak": peak_memory(device), "tokens": tokens}))


def measure(shape: str, smoke: bool, device: str) -> dict[str, int]:
    args = [sys.executable, __file__, "--child", shape, "--device", device, *(["--smoke"] if smoke else [])]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the {shape} child exited {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def kv_bytes(rows: list[tuple[int, int]], device: str) -> int:
    """Bytes of keys and values for rows of (prompt length, max_tokens) of the tiny model on ``device``."""
    config = AutoConfig.from_pretrained(tiny_model_path())
    head_dim = config.head_dim or config.hidden_size // config.num_attention_heads
    element = torch.empty(0, dtype=resolve_placement(device).dtype).element_size()
    per_position = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * element
    return sum(prompt + most for prompt, most in rows) * per_position


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="replies of at most 64 tokens")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the sampler computes")
    parser.add_argument("--child", choices=SHAPES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.smoke, args.device)
        return
    peaks = {shape: measure(shape, args.smoke, args.device) for shape in SHAPES}
    what = "GPU memory allocated" if args.device == "cuda" else "RSS"
    asked = requests(args.smoke)
    longest = max(len(prompt) + most for prompt, most in asked)
    mib = 2**20
    print(f"{ROWS} concurrent one-sample requests, prompts of {len(asked[0][0])}-{len(asked[-1][0])} tokens, "
          f"max_tokens {asked[-1][1]}-{asked[0][1]} (tiny model, {args.device}, each shape in a child process):")
    for shape, peak in peaks.items():
        print(f"  {shape:8s} idle {peak['idle'] / mib:7.1f} MiB, peak {what} {peak['peak'] / mib:7.1f} MiB, "
              f"{peak['tokens']:6d} tokens sampled")
    ragged = peaks["ragged"]
    print(f"  ragged peak {what} {ragged['peak'] / 2**30:.2f} GiB: {ragged['peak'] / ragged['idle']:.2f}x idle "
          f"(target <= 1.25x), {ragged['peak'] / peaks['uniform']['peak']:.2f}x the uniform batch's; KV needed: "
          f"ragged {kv_bytes([(len(p), most) for p, most in asked], args.device) / mib:.1f} MiB, "
          f"uniform {kv_bytes([(longest, 0)] * ROWS, args.device) / mib:.1f} MiB")


if __name__ == "__main__":
    main()
