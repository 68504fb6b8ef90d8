"""Stand-in for the model a perf_analyzer input file was written for (see tests/inputdata/README.md).

The model config's parameter "op" picks what it computes from its inputs, in input order:
  addsub  OUT[0] = A + B, OUT[1] = A - B (Triton's qa "simple" add/sub models)
  subadd  OUT[0] = A - B, OUT[1] = A + B
  echo    OUT[i] = IN[i] (BYTES or numbers), missing optional inputs give zeros
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.op = config["parameters"]["op"]["string_value"]
        self.inputs = [t["name"] for t in config["input"]]
        self.outputs = [t["name"] for t in config["output"]]

    def execute(self, requests):
        responses = []
        for r in requests:
            vals = []
            for name in self.inputs:
                t = pb_utils.get_input_tensor_by_name(r, name)
                vals.append(None if t is None else t.as_numpy())
            if self.op in ("addsub", "subadd"):
                a, b = vals[0], vals[1]
                outs = [a + b, a - b] if self.op == "addsub" else [a - b, a + b]
            else:
                present = next(v for v in vals if v is not None)
                outs = [v if v is not None else np.zeros_like(present) for v in vals]
            tensors = [pb_utils.Tensor(n, o) for n, o in zip(self.outputs, outs)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
