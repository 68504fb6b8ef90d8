"""OUTPUT = INPUT + START, element-wise over strings of integers (a sequence's first step adds 1).

The direct sequence batcher fills idle batch slots with null requests (READY 0, empty strings).
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(r, "START").as_numpy().reshape(-1)
            out = np.empty(x.shape, dtype=np.object_)
            for i, row in enumerate(x):
                out[i] = [str(int(v or 0) + int(start[i])).encode() for v in row]
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", out)]))
        return responses
