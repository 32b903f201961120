"""A request's outcome against its SLO: the ``outcome`` label of ``REQUESTS``
(``contracts/metrics.py``), recorded once per request that reached a model route.

Outcomes (``REQUESTS`` at the edge; one per request that reached the model route)
- ``good``: answered, TTFT ≤ ``slo.ttft_s`` and TPOT ≤ ``slo.tpot_s`` (a one-token answer
  has no TPOT). A non-streamed answer's first token is not seen at the edge: it is judged on
  its E2E against the budget the two limits give, ``ttft_s + (tokens − 1) × tpot_s``, and
  a miss counts as ``slow_ttft``.
- ``slow_ttft``: answered, TTFT over its limit (checked first); ``slow_tpot``: TPOT over.
- ``error``: the fleet failed it (5xx, a stream that ended with an in-band error).
- ``rejected``: the fleet refused it before any work (429 overload or quota, 503).
- ``invalid``: the client's own mistake (other 4xx); ``cancelled``: the client went away
  before the end. Neither counts for or against the SLO.

Goodput ratio = good / (good + slow_ttft + slow_tpot + error + rejected).
"""

from __future__ import annotations

OUTCOMES = ("good", "slow_ttft", "slow_tpot", "error", "rejected", "invalid", "cancelled")
SLO_OUTCOMES = ("good", "slow_ttft", "slow_tpot", "error", "rejected")  # the goodput denominator


def classify(
    *,
    status: int,
    ttft_s: float | None,
    e2e_s: float | None,
    output_tokens: int,
    ttft_slo_s: float,
    tpot_slo_s: float,
    failed: bool = False,
    cancelled: bool = False,
) -> str:
    """One request's outcome (see the module header). ``ttft_s`` None: not streamed."""
    if cancelled and not failed:
        return "cancelled"
    if status in (429, 503):
        return "rejected"
    if 400 <= status < 500:
        return "invalid"
    if status >= 500 or failed or e2e_s is None:
        return "error"
    if ttft_s is None:  # non-streamed: the E2E budget the two limits give
        budget = ttft_slo_s + max(0, output_tokens - 1) * tpot_slo_s
        return "good" if e2e_s <= budget else "slow_ttft"
    if ttft_s > ttft_slo_s:
        return "slow_ttft"
    if output_tokens >= 2 and (e2e_s - ttft_s) / (output_tokens - 1) > tpot_slo_s:
        return "slow_tpot"
    return "good"
