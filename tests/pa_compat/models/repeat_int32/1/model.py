"""Decoupled: one response per element of IN (OUT, IDX), DELAY[i] ms apart, then the final flag.

A negative value in IN is refused with an error response (for the test of a run whose every request fails).
"""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy().reshape(-1)
            delays = pb_utils.get_input_tensor_by_name(r, "DELAY").as_numpy().reshape(-1)
            wait = pb_utils.get_input_tensor_by_name(r, "WAIT").as_numpy().reshape(-1)
            if (values < 0).any():
                error = pb_utils.TritonError("IN holds a negative count")
                sender.send(
                    pb_utils.InferenceResponse(error=error), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                )
                continue
            for i, v in enumerate(values):
                time.sleep(float(delays[i % len(delays)]) / 1e3 if len(delays) else 0.0)
                out = [
                    pb_utils.Tensor("OUT", np.array([v], np.int32)),
                    pb_utils.Tensor("IDX", np.array([i], np.uint32)),
                ]
                sender.send(pb_utils.InferenceResponse(output_tensors=out))
            time.sleep(float(wait[0]) / 1e3 if len(wait) else 0.0)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
