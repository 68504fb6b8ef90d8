"""Request-parameters fixture: answers INPUT0 as OUTPUT0 only where every request parameter its config's
`expect` (JSON object) names arrived with that value and type; otherwise the request fails with what
did arrive. Decoupled (params_check_stream): the answer, then an empty final response."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.expect = json.loads(cfg["parameters"]["expect"]["string_value"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(cfg)

    def _answer(self, request):
        got = json.loads(request.parameters() or "{}")
        wrong = {
            k: got.get(k) for k, v in self.expect.items() if k not in got or got[k] != v or type(got[k]) is not type(v)
        }
        if wrong:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(
                    f"lack {sorted(wrong)}; request parameters {json.dumps(got, sort_keys=True)}"
                )
            )
        data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", data)])

    def execute(self, requests):
        if not self.decoupled:
            return [self._answer(r) for r in requests]
        for r in requests:
            sender = r.get_response_sender()
            sender.send(self._answer(r))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
