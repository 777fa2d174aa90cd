"""What a request to ``minds serve`` costs a new client, quiet and under connection floods (issue 40), and the same
for uvicorn, the well-kept ASGI server the issue proposed instead.

Run: ``.venv/bin/python benchmarks/serve_floods.py`` (``--smoke``: a few requests and a small flood, seconds;
``--server minds`` or ``uvicorn``: one of the two, both by default; ``--checkout DIR``: serve the ``minds_core`` of
another checkout instead, e.g. ``git archive main minds_core | tar -x -C DIR``, to compare with the server before the
change; run it from outside this checkout, whose ``minds_core`` a ``python -m`` started in it would import first).
A ``minds serve --model minds-tiny`` subprocess is asked ``GET /api/v1/healthz``: ``--requests`` times on one
kept-alive connection and as many times on a new connection each (a new client), first quiet, then while ``--flood``
connections from this process sit idle, then while as many reconnect as fast as they are dropped; last, on a server
started under ``ulimit -n 256``, while ``--flood``/2 slow connections drip a header byte a second. Then the same
against uvicorn serving the same path and key check (``tests/serve/uvicorn_healthz.py``), once with its documented
bounds set as close to minds serve's as they go and once with its defaults. Each figure is the median ms, with the ratio to the quiet figure of the same
server in the same run; a request not answered within 10 s counts as locked out (after 3, the condition stops).
Targets: no request locked out; under a flood, a new client's request within 10x the quiet one.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "serve"))
from conftest import KEY, Served, launch, start_server
from flood import Flood

HEALTHZ = "/api/v1/healthz"
UVICORN_SERVER = Path(__file__).resolve().parent.parent / "tests" / "serve" / "uvicorn_healthz.py"
#: Requests not answered in time after which a condition stops: the server is locking clients out.
GIVE_UP = 3


def timed(ask: Callable[[], int], requests: int) -> tuple[float | None, list[str]]:
    """Median ms of ``requests`` calls of ``ask`` (which returns the answer's status), and why each call that failed
    did: no answer, or a status other than 200 (a server's 503 when it is full). Locked out either way."""
    times, failed = [], []
    for _ in range(requests):
        began = time.perf_counter()
        try:
            status = ask()
        except (OSError, http.client.HTTPException, httpx.HTTPError) as error:
            failed.append(f"no answer ({type(error).__name__})")
        else:
            if status == 200:
                times.append(time.perf_counter() - began)
            else:
                failed.append(f"status {status}")
        if len(failed) >= GIVE_UP:
            break
    return (1000 * statistics.median(times) if times else None), failed


def new_client(served: Served) -> int:
    """One request on a new connection (http.client: little of the client's own cost in the figure); its status."""
    host, port = address(served)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", HEALTHZ, headers={"X-API-Key": KEY})
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


def measure(served: Served, requests: int) -> dict[str, tuple[float | None, list[str]]]:
    """``timed`` figures of a kept-alive connection and of new connections."""
    with httpx.Client(base_url=served.url, headers={"X-API-Key": KEY}, timeout=10) as kept:
        return {
            "kept-alive": timed(lambda: kept.get(HEALTHZ).status_code, requests),
            "new connection": timed(lambda: new_client(served), requests),
        }


def report(condition: str, figures: dict[str, tuple[float | None, list[str]]], quiet: dict[str, tuple[float | None, list[str]]]) -> None:
    for how, (ms, failed) in figures.items():
        base = quiet[how][0]
        shown = "locked out" if ms is None else f"{ms:7.2f} ms" + (f" ({ms / base:5.2f}x quiet)" if base else "")
        print(f"{condition:58s} {how:15s} {shown}" + (f", failed: {', '.join(sorted(set(failed)))} x{len(failed)}" if failed else ""))


def address(served: Served) -> tuple[str, int]:
    parts = urlsplit(served.url)
    return str(parts.hostname), int(parts.port or 0)


def minds_serve(env: dict[str, str]) -> Callable[[Path, int | None], Served]:
    """Starts ``minds serve`` over minds-tiny (of ``env``'s checkout) in a folder, under an open-file limit."""
    return lambda folder, open_files: start_server(folder, "--model", "minds-tiny", "--api-key", KEY, env=env, open_files=open_files)


def uvicorn_serve(*settings: str) -> Callable[[Path, int | None], Served]:
    """Starts the comparison uvicorn server (with ``settings``) under an open-file limit; it writes no folder."""
    return lambda folder, open_files: launch([sys.executable, str(UVICORN_SERVER), KEY, *settings], open_files=open_files)


def floods(name: str, start: Callable[[Path, int | None], Served], requests: int, flood: int, tmp: Path) -> None:
    """Every condition against servers ``start`` makes, each figure printed with ``name``."""
    served = start(tmp / f"{name}-quiet", None)
    try:
        quiet = measure(served, requests)
        report(f"{name}: quiet", quiet, quiet)
        with Flood(address(served), flood):
            report(f"{name}: {flood} idle connections", measure(served, requests), quiet)
        with Flood(address(served), flood, reconnect=True):
            report(f"{name}: {flood} reconnecting as dropped", measure(served, requests), quiet)
    finally:
        served.stop()
    served = start(tmp / f"{name}-few", 256)
    try:
        opening = b"POST /api/v1/create_session HTTP/1.1\r\nHost: x\r\nX-Slow: "
        with Flood(address(served), flood // 2, opening=opening, drip=True, reconnect=True):
            report(f"{name}: ulimit -n 256, {flood // 2} slow connections", measure(served, requests), quiet)
    finally:
        served.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100, help="requests per figure")
    parser.add_argument("--flood", type=int, default=600, help="connections in a flood")
    parser.add_argument("--server", choices=["minds", "uvicorn", "both"], default="both", help="which servers to flood")
    parser.add_argument("--checkout", type=Path, help="serve the minds_core of this checkout (the server before a change)")
    parser.add_argument("--smoke", action="store_true", help="a few requests, a small flood: checks the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.flood = 5, 40
    env = {"PYTHONPATH": str(args.checkout.resolve())} if args.checkout else {}
    servers = {
        "minds serve": minds_serve(env),
        "uvicorn, bounded": uvicorn_serve(),
        "uvicorn, its defaults": uvicorn_serve("--defaults"),
    }
    if args.server != "both":
        servers = {name: start for name, start in servers.items() if name.startswith(args.server)}
    print(f"minds serve from {args.checkout or 'this checkout'}, {args.requests} requests per figure, floods of {args.flood}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, start in servers.items():
            floods(name, start, args.requests, args.flood, Path(tmp))
    sys.stdout.flush()
    os._exit(0)  # the flood threads of a server that locked clients out may still be connecting


if __name__ == "__main__":
    main()
