"""The autoscaler's latest decision, read back from its metrics for ``llmfleet status``.

The scaling policy runs inside Serve's controller and exports every decision
(``autoscaler/decision_metrics.py``) on Ray's metrics port of the head node, where
``llmfleet up`` runs and records that port in its state file. ``parse`` reads the Prometheus
text exposition (pure: tested on captured text); ``describe`` gives the lines ``status``
prints for one deployment, e.g. a fleet that stays at 2 replicas while idle::

    autoscaler LLMReplica (ttft-queue): running 2, wants 2: held by the burst reserve: ...
      signal [/ target]: boot_s 29.5, burst_reserve_replicas 2 / 2, ...
      moves so far: up 1 (queue_delay)

Found by hand: after a 90-s burst a vLLM fleet stayed at 2 idle replicas, by design (the
burst reserve keeps what the last hour's bursts needed), and nothing but a Prometheus query
said why. Ray's default policy (``ongoing-requests``) exports none of these: no view.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.metrics import (
    AUTOSCALER_CURRENT,
    AUTOSCALER_DECISIONS,
    AUTOSCALER_DESIRED,
    AUTOSCALER_SIGNAL,
    AUTOSCALER_TARGET,
    PROM_PREFIX,
)

RESERVE = "burst_reserve_replicas"


@dataclass(slots=True)
class AutoscalerView:
    deployment: str
    policy: str = "?"
    desired: int | None = None
    current: int | None = None
    signals: dict[str, float] = field(default_factory=dict)
    targets: dict[str, float] = field(default_factory=dict)
    moves: dict[tuple[str, str], int] = field(default_factory=dict)  # (direction, reason)


def parse(text: str) -> dict[str, AutoscalerView]:
    """Prometheus text → one view per ``deployment_name`` that has a desired count."""
    from prometheus_client.parser import text_string_to_metric_families

    views: dict[str, AutoscalerView] = {}
    names = {
        PROM_PREFIX + m.name: m
        for m in (
            AUTOSCALER_DESIRED,
            AUTOSCALER_CURRENT,
            AUTOSCALER_SIGNAL,
            AUTOSCALER_TARGET,
            AUTOSCALER_DECISIONS,
        )
    }
    for family in text_string_to_metric_families(text):
        metric = names.get(family.name) or names.get(family.name.removesuffix("_total"))
        if metric is None:
            continue
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            dep = s.labels.get("deployment_name", "?")
            view = views.setdefault(dep, AutoscalerView(dep))
            view.policy = s.labels.get("policy", view.policy)
            if metric is AUTOSCALER_DESIRED:
                view.desired = round(s.value)
            elif metric is AUTOSCALER_CURRENT:
                view.current = round(s.value)
            elif metric is AUTOSCALER_SIGNAL:
                view.signals[s.labels.get("signal", "?")] = s.value
            elif metric is AUTOSCALER_TARGET:
                view.targets[s.labels.get("signal", "?")] = s.value
            else:
                key = (s.labels.get("direction", "?"), s.labels.get("reason", "?"))
                view.moves[key] = view.moves.get(key, 0) + round(s.value)
    return {dep: v for dep, v in views.items() if v.desired is not None}


def _num(value: float) -> str:
    return f"{value:.3g}"


def state_line(view: AutoscalerView, min_replicas: int | None = None) -> str:
    """``min_replicas``: the fleet's floor (``llmfleet up`` records it): a fleet held there
    is not held by the reserve, whatever the reserve says."""
    desired, current = view.desired, view.current
    head = f"autoscaler {view.deployment} ({view.policy}): running {current}, wants {desired}"
    if desired is None or current is None:
        return head
    if desired > current:
        return f"{head}: scaling up"
    if desired < current:
        return f"{head}: scaling down"
    if min_replicas is not None and desired <= min_replicas:
        return f"{head}: at its floor (autoscaling.min_replicas {min_replicas})"
    reserve = view.signals.get(RESERVE)
    if reserve is not None and desired > 0 and reserve >= desired:
        boot = view.signals.get("boot_s")
        within = f"one boot ({_num(boot)} s)" if boot is not None else "one boot"
        return (
            f"{head}: held by the burst reserve: the last hour's bursts need {_num(reserve)} "
            f"replicas within {within}; it falls as they leave the hour "
            "(autoscaling.params.target_attainment is the risk; 0 turns it off)"
        )
    return f"{head}: steady"


def describe(view: AutoscalerView, min_replicas: int | None = None) -> list[str]:
    lines = [state_line(view, min_replicas)]
    pairs = []
    for name in sorted(view.signals):
        target = view.targets.get(name)
        value = _num(view.signals[name])
        pairs.append(
            f"{name} {value} / {_num(target)}" if target is not None else f"{name} {value}"
        )
    if pairs:
        lines.append("  signal [/ target]: " + ", ".join(pairs))
    if view.moves:
        moves = ", ".join(
            f"{direction} {count} ({reason})"
            for (direction, reason), count in sorted(view.moves.items())
        )
        lines.append(f"  moves so far: {moves}")
    return lines
