"""The accuracy guard's probe on the real server: its requests go out together and come back
in order, from whichever thread runs it (tritonclient.http is gevent-based, and a client used
across threads fails with greenlet's "Cannot switch to a different thread")."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from perfkit.server.base import Server
from perfkit.tuner._accuracy import REQUESTS, make_probe


def _expected(probe_inputs: tuple[dict, ...]) -> np.ndarray:
    return np.stack([req["INPUT0"][1] for req in probe_inputs])


def test_probe_returns_every_output_in_request_order(triton: Server) -> None:
    probe = make_probe(triton.endpoints.http_url, "identity", triton.model_metadata("identity"), 8)
    assert probe is not None
    got = probe.run()
    assert got["OUTPUT0"].shape == (REQUESTS, 1, 16)
    np.testing.assert_array_equal(got["OUTPUT0"], _expected(probe.inputs))


def test_probe_runs_from_worker_threads_at_once(triton: Server) -> None:
    # Several probes at once, each from a thread that is not the main one (as a tuner run inside
    # a worker would): every one must answer, each with its own inputs echoed back.
    probes = [
        make_probe(triton.endpoints.http_url, "identity", triton.model_metadata("identity"), 8, seed=s)
        for s in range(4)
    ]
    threads: set[int] = set()

    def run(i: int) -> np.ndarray:
        threads.add(threading.get_ident())
        p = probes[i]
        assert p is not None
        return p.run()["OUTPUT0"]

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(run, [0, 1, 2, 3, 0, 1, 2, 3]))
    assert threading.get_ident() not in threads
    for i, out in enumerate(outs):
        p = probes[i % 4]
        assert p is not None
        np.testing.assert_array_equal(out, _expected(p.inputs))
