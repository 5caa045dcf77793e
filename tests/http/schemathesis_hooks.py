"""Schemathesis hooks for the http_openapi test (loaded through schemathesis.toml).

Two rules of docs/openapi.yaml that JSON Schema cannot state, applied to the cases generated as
valid so that positive_data_acceptance holds the server to 2xx for what the contract calls valid.
Negative cases are left as generated: any 4xx is right for them.
- The X-Priority header and the JSON body's "priority" must name the same class when both are
  given (the Priority parameter), or the answer is 400 bad_priority: a case naming two classes is
  made to name the header's in both.
- An integer anywhere in a JSON body must fit in 64 bits (the JSON parser's limit; the request
  schemas say so), or the answer is 400 invalid_json: a larger one, in the members the server
  ignores, is clamped into range.
"""
import schemathesis
from schemathesis.generation.modes import GenerationMode


@schemathesis.hook
def map_case(context, case):
    meta = case.meta
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE:
        return case
    header = case.headers.get("X-Priority") if case.headers else None
    if header is not None and isinstance(case.body, dict) and "priority" in case.body:
        case.body = {**case.body, "priority": header}
    if isinstance(case.body, (dict, list)):
        case.body = _within_64_bits(case.body)
    return case


def _within_64_bits(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return min(max(value, -(2**63)), 2**64 - 1)
    if isinstance(value, dict):
        return {k: _within_64_bits(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_within_64_bits(v) for v in value]
    return value
