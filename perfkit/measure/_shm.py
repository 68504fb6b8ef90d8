"""Shared-memory regions for inputs and outputs: created, registered, and always cleaned up."""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from perfkit.errors import ServerError, ServerRefusedError, UsageError
from perfkit.loadgen import ModelIO, ShmBinding, Tensor
from perfkit.server.base import Server

_log = logging.getLogger(__name__)
# Triton refuses to unregister a region that requests it is still executing use (its shared
# memory manager counts references); after an interrupt those requests finish within moments,
# so unregistering is retried for this long before the region is reported as left behind.
UNREGISTER_WAIT_S = 10.0


def _unregister(unregister: Callable[[str], None], name: str) -> None:
    deadline = time.monotonic() + UNREGISTER_WAIT_S
    while True:
        try:
            unregister(name)
            return
        except ServerRefusedError:  # a server without client shared memory registered nothing
            return
        except ServerError as err:
            if time.monotonic() > deadline:
                _log.warning("shared memory %s left registered: %s", name, err.one_line())
                return
        except Exception as err:  # the server is gone: nothing left to unregister from
            _log.debug("shared memory %s not unregistered: %s", name, err)
            return
        time.sleep(0.05)


_ELEMENT_BYTES = {
    "BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2,
    "UINT32": 4, "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8,
}  # fmt: skip


def output_region_bytes(io: ModelIO, batch_size: int, default_bytes: int) -> dict[str, int]:
    """Bytes of each output's region: a fixed-shape output's size for the whole batch, as perf_analyzer
    sizes them; `default_bytes` (--output-shared-memory-size) where the size is not known (BYTES, -1 dims)."""
    sizes = {name: default_bytes for name in io.outputs}
    for name, datatype, dims in io.output_specs:
        if datatype in _ELEMENT_BYTES and all(d >= 0 for d in dims):
            n = _ELEMENT_BYTES[datatype] * (batch_size if io.max_batch_size > 0 else 1)
            for d in dims:
                n *= d
            sizes[name] = n
    return sizes


class SharedMemory:
    """Regions for every step's inputs and for each output; a context manager that cleans up."""

    def __init__(
        self, server: Server, kind: str, io: ModelIO, steps: list[list[Tensor]], output_size: int, batch_size: int = 1
    ):
        self.server = server
        self.batch_size = batch_size
        self.kind = kind
        self.io = io
        self.steps = steps
        self.output_size = output_size
        self._tag = f"perfkit_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self._system: list[tuple[str, Any]] = []
        self._cuda: list[tuple[str, Any]] = []
        self.inputs: list[dict[str, ShmBinding]] = []
        self.outputs: dict[str, ShmBinding] = {}

    def __enter__(self) -> SharedMemory:
        try:
            for i, step in enumerate(self.steps):
                bindings = {}
                for j, t in enumerate(step):
                    # by position: tensor names may hold '/' (TensorFlow's), which a shm key cannot
                    name = f"{self._tag}_s{i}_in{j}"
                    self._create(name, t.data)
                    bindings[t.name] = ShmBinding(name, len(t.data))
                self.inputs.append(bindings)
            sizes = output_region_bytes(self.io, self.batch_size, self.output_size)
            for k, out in enumerate(self.io.outputs):
                name = f"{self._tag}_out{k}"
                self._create(name, None, sizes[out])
                self.outputs[out] = ShmBinding(name, sizes[out])
        except BaseException:
            self.close()
            raise
        return self

    def _create(self, name: str, data: bytes | None, out_size: int = 0) -> None:
        size = len(data) if data is not None else out_size
        size = max(size, 1)
        if self.kind == "system":
            import numpy as np
            import tritonclient.utils.shared_memory as shm

            key = f"/{name}"
            handle = shm.create_shared_memory_region(name, key, size)
            self._system.append((name, handle))
            if data:
                shm.set_shared_memory_region(handle, [np.frombuffer(data, dtype=np.uint8)])
            self.server.register_system_shared_memory(name, key, size)
            return
        cudashm = _cuda_module()
        try:
            handle = cudashm.create_shared_memory_region(name, size, 0)
        except Exception as err:
            raise UsageError(
                f"--shared-memory cuda: cannot allocate CUDA memory ({err})",
                hint="CUDA shared memory needs an NVIDIA GPU and driver on the client machine; use system",
            ) from None
        self._cuda.append((name, handle))
        if data:
            import numpy as np

            cudashm.set_shared_memory_region(handle, [np.frombuffer(data, dtype=np.uint8)])
        raw = cudashm.get_raw_handle(handle)
        raw_b64 = raw.decode() if isinstance(raw, bytes) else base64.b64encode(raw).decode()
        self.server.register_cuda_shared_memory(name, raw_b64, 0, size)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unregister and destroy every region; never raises (called on error paths)."""
        for name, handle in self._system:
            _unregister(self.server.unregister_system_shared_memory, name)
            try:
                import tritonclient.utils.shared_memory as shm

                shm.destroy_shared_memory_region(handle)
            except Exception:
                pass
        self._system.clear()
        for name, handle in self._cuda:
            _unregister(self.server.unregister_cuda_shared_memory, name)
            try:
                _cuda_module().destroy_shared_memory_region(handle)
            except Exception:
                pass
        self._cuda.clear()


def _cuda_module() -> Any:
    try:
        import tritonclient.utils.cuda_shared_memory as cudashm
    except Exception as err:
        raise UsageError(
            f"--shared-memory cuda is unavailable here ({err})",
            hint="it needs CUDA (cuda-python and an NVIDIA driver); use --shared-memory system",
        ) from None
    return cudashm
