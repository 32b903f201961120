"""Ray Serve adapter: run a pure scaling policy as a Serve custom autoscaling policy.

Use
    cfg = ScalingConfig(min_replicas=1, max_replicas=8, ttft_slo_s=2.0)
    autoscaling_config = build_autoscaling_config("ttft-queue", cfg)
    # == AutoscalingConfig(min_replicas=1, max_replicas=8, metrics_interval_s=0.5,
    #        look_back_period_s=2.0, upscale_delay_s=0, downscale_delay_s=0,
    #        policy=AutoscalingPolicy(policy_function=ServeScalingPolicy,
    #            policy_kwargs={"policy": "ttft-queue", "config": {...ScalingConfig fields...}}))

How Serve drives it (Ray 2.60): the controller instantiates ``ServeScalingPolicy(**policy_kwargs)``
once and calls it with an ``AutoscalingContext`` every control-loop tick (~0.1 s). Replicas
push ``record_autoscaling_stats()`` (``ReplicaStats.to_wire()``) every ``metrics_interval_s``;
``ctx.aggregated_metrics[name][replica_id]`` is the mean over ``look_back_period_s`` (for
cumulative counters the adapter takes the newest sample of ``ctx.raw_metrics``, for the
backlog gauges the larger of that sample and the mean). Serve
wraps the policy with its own factors and delays, so ``build_autoscaling_config`` sets
``upscale_delay_s = downscale_delay_s = 0`` for our policies (they own their hysteresis)
and leaves Ray's default policy with Ray's delays for ``ongoing-requests``. With zero
running replicas and queued requests Serve starts one replica without calling the policy.
State: each policy keeps a frozen state dataclass; Serve wants a dict in
``ctx.policy_state``. ``state_to_serve``/``state_from_serve`` convert here and only here:
one entry per field, named as the field (never starting with ``__``, as Serve's own keys
do; those are dropped on the way in and merged back by Serve on the way out).

Contract with Ray's cluster autoscaler: each replica asks for the resources of its
tensor-parallel group (e.g. ``{"GPU": tp}`` or a placement group of ``tp`` GPU bundles).
This policy only sets the replica count; when Serve cannot place a new replica for lack of
resources, the pending actor/placement-group demand is what Ray's cluster autoscaler sees,
and it adds a node of a type that fits (``available_node_types`` in the cluster config).
Idle nodes leave after ``idle_timeout_minutes``. So a scale-up costs node boot + model load
on an empty cluster; keep ``min_replicas`` (or spare nodes) for latency-critical services.

Metrics: after each decision ``__call__`` exports it (``decision_metrics.export_decision``:
desired and running replicas, the policy's signals and targets from ``explain.explain``, and a
decision counted by direction and reason when ``desired`` differs from
``ctx.target_num_replicas``, Serve's target set by the previous decision). It reads
``ctx.deployment_name``, ``current_num_replicas`` and ``target_num_replicas``. The metric
objects are ``ray.util.metrics`` ones (``ray.serve.metrics`` needs a replica context; the
controller has none), created once per process in ``_RAY_METRICS``: Serve may re-create the
policy object. A metrics error is logged once (debug) and never stops scaling. Ray's default
policy (``ongoing-requests``) runs without this class and exports only Serve's own metrics.

The classes here are plain Python; only ``build_autoscaling_config`` and ``ray_metric`` import Ray. The
``autoscaler`` package must be importable in the Serve controller (installed in the env or
shipped via ``runtime_env``): the policy class is pickled by value, its imports by name.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autoscaler.common import RayDelayParams, parse_params
from autoscaler.decision_metrics import Decision, MetricFactory, export_decision
from autoscaler.explain import explain
from autoscaler.registry import POLICY_NAMES, check_params, make_policy
from autoscaler.types import MetricsSnapshot, ReplicaMetrics, ScalingConfig, ScalingPolicy
from contracts.metrics import Metric
from contracts.stats import BACKLOG_FIELDS, CUMULATIVE_FIELDS, from_wire

if TYPE_CHECKING:
    from ray.serve.config import AutoscalingConfig

RAY_RUNNING_REQUESTS_KEY = "running_requests"  # Serve's own per-replica ongoing count
log = logging.getLogger(__name__)
_RAY_METRICS: dict[str, Any] = {}  # Ray metric objects by name, one each per process


def ray_metric(metric: Metric) -> Any:
    """The process's ``ray.util.metrics`` Gauge/Counter for a catalogue entry, made once."""
    made = _RAY_METRICS.get(metric.name)
    if made is None:
        from ray.util import metrics

        cls = metrics.Gauge if metric.kind == "gauge" else metrics.Counter
        made = cls(metric.name, description=metric.description, tag_keys=metric.labels)
        _RAY_METRICS[metric.name] = made
    return made


def scaling_config_from_dict(data: Mapping[str, Any]) -> ScalingConfig:
    known = {f.name for f in dataclasses.fields(ScalingConfig)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown ScalingConfig fields: {sorted(unknown)}")
    return ScalingConfig(**dict(data))


def scaling_config_to_dict(cfg: ScalingConfig) -> dict[str, Any]:
    out = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    out["params"] = dict(cfg.params)
    return out


def _replica_key(replica_id: Any) -> str:
    return str(getattr(replica_id, "unique_id", replica_id))


def latest_samples(ctx: Any) -> list[tuple[str, str, float]]:
    """``(replica, metric, value)``: each cumulative counter (``CUMULATIVE_FIELDS``) and
    backlog gauge (``BACKLOG_FIELDS``) at the newest sample of Serve's raw series
    (``ctx.raw_metrics``), which the window mean in ``aggregated_metrics`` would lag by half
    of ``look_back_period_s``. Empty where Serve gives no raw series (the means are used
    then)."""
    try:
        raw = getattr(ctx, "raw_metrics", None) or {}
    except Exception:  # a lazy Serve getter that fails: the means are used
        log.debug("raw metrics unavailable", exc_info=True)
        return []
    out = []
    for name in (*CUMULATIVE_FIELDS, *BACKLOG_FIELDS):
        for replica_id, series in (raw.get(name) or {}).items():
            samples = (s for s in series or () if hasattr(s, "timestamp"))
            newest = max(samples, key=lambda s: s.timestamp, default=None)
            if newest is not None:
                out.append((_replica_key(replica_id), name, float(newest.value)))
    return out


def snapshot_from_context(ctx: Any) -> MetricsSnapshot:
    """``AutoscalingContext`` → ``MetricsSnapshot`` (metric-major → replica-major).

    Per replica: the ``ReplicaStats`` wire keys (window means; the cumulative counters at
    their latest reported value, the backlog gauges at the larger of that and their mean:
    ``latest_samples``, ``contracts.stats``) decoded with ``from_wire(strict=False)``
    (a bad report is logged and counted, and reads as neutral); ``ongoing`` is Serve's
    ``running_requests`` when reported, else the engine's count."""
    per_replica: dict[str, dict[str, float]] = {}
    for name, values in (ctx.aggregated_metrics or {}).items():
        for replica_id, value in values.items():
            per_replica.setdefault(_replica_key(replica_id), {})[name] = float(value)
    for rid, name, value in latest_samples(ctx):
        wire = per_replica.get(rid)
        if wire is None:  # a replica Serve no longer aggregates
            continue
        wire[name] = max(value, wire.get(name, value)) if name in BACKLOG_FIELDS else value
    replicas = []
    for rid, wire in sorted(per_replica.items()):
        ray_ongoing = wire.pop(RAY_RUNNING_REQUESTS_KEY, None)
        stats = from_wire(wire, strict=False)
        replicas.append(ReplicaMetrics.from_stats(rid, stats, ongoing=ray_ongoing))
    pending = float(ctx.total_queued_requests or 0.0)
    if ctx.current_num_replicas == 0:
        pending = max(pending, float(ctx.total_num_requests or 0.0))
    now = ctx.current_time if ctx.current_time is not None else time.time()
    return MetricsSnapshot(
        now=float(now),
        current_replicas=int(ctx.target_num_replicas),
        replicas=tuple(replicas),
        pending_requests=pending,
    )


def state_to_serve(state: Any) -> dict[str, Any]:
    """A policy's state dataclass as Serve's policy-state dict (one entry per field)."""
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}


def state_from_serve(policy: ScalingPolicy[Any], data: Mapping[str, Any]) -> Any:
    """Serve's policy-state dict back to the policy's state dataclass; fields absent (the
    first call: Serve starts from ``{}``) keep their initial values, other keys (Serve's
    ``__`` ones) are ignored."""
    initial = policy.initial_state()
    names = {f.name for f in dataclasses.fields(initial)}
    return dataclasses.replace(initial, **{k: v for k, v in data.items() if k in names})


class ServeScalingPolicy:
    """Serve custom autoscaling policy class: ``policy_kwargs={"policy": ..., "config": ...}``."""

    def __init__(self, policy: str = "ttft-queue", config: Mapping[str, Any] | None = None) -> None:
        self.policy = make_policy(policy)
        self.config = scaling_config_from_dict(config or {})
        check_params(policy, self.config.params)
        self.metric: MetricFactory = ray_metric
        self._metrics_failed = False

    def __call__(self, ctx: Any) -> tuple[int, dict[str, Any]]:
        snapshot = snapshot_from_context(ctx)
        cfg = dataclasses.replace(
            self.config,
            min_replicas=int(ctx.capacity_adjusted_min_replicas),
            max_replicas=int(ctx.capacity_adjusted_max_replicas),
        )
        state = state_from_serve(self.policy, ctx.policy_state or {})
        desired, new = self.policy.decide(snapshot, cfg, state)
        self._export(ctx, snapshot, cfg, new, desired)
        return desired, state_to_serve(new)

    def _export(
        self, ctx: Any, snapshot: MetricsSnapshot, cfg: ScalingConfig, state: Any, desired: int
    ) -> None:
        try:
            decision = Decision(
                deployment_name=str(getattr(ctx, "deployment_name", None) or "unknown"),
                policy=self.policy.name,
                current=int(ctx.current_num_replicas),
                previous=snapshot.current_replicas,
                desired=desired,
                explanation=explain(self.policy, snapshot, cfg, state, desired),
            )
            export_decision(self.metric, decision)
        except Exception as exc:  # metrics must never stop scaling
            if not self._metrics_failed:
                self._metrics_failed = True
                log.debug("autoscaler metrics disabled after an error: %r", exc)


def build_autoscaling_config(
    policy: str,
    cfg: ScalingConfig,
    *,
    metrics_interval_s: float = 0.5,
    look_back_period_s: float = 2.0,
) -> AutoscalingConfig:
    from ray.serve.config import AutoscalingConfig, AutoscalingPolicy

    if policy not in POLICY_NAMES:
        raise ValueError(f"unknown autoscaling policy {policy!r}; choose one of {POLICY_NAMES}")
    check_params(policy, cfg.params)
    common: dict[str, Any] = {
        "min_replicas": cfg.min_replicas,
        "max_replicas": cfg.max_replicas,
        "metrics_interval_s": metrics_interval_s,
        "look_back_period_s": look_back_period_s,
    }
    if policy == "ongoing-requests":  # Ray's own default policy and delays
        d = parse_params(RayDelayParams, cfg.params, policy)
        factors = ("upscaling_factor", "downscaling_factor")  # unset: Ray's own default (1)
        common |= {
            "target_ongoing_requests": cfg.target_ongoing_requests,
            "upscale_delay_s": d.upscale_delay_s,
            "downscale_delay_s": d.downscale_delay_s,
            **{k: getattr(d, k) for k in factors if k in cfg.params},
        }
    else:
        kwargs = {"policy": policy, "config": scaling_config_to_dict(cfg)}
        common |= {
            "upscale_delay_s": 0.0,
            "downscale_delay_s": 0.0,
            "policy": AutoscalingPolicy(  # type: ignore[no-untyped-call]  # Ray: no hints
                policy_function=ServeScalingPolicy, policy_kwargs=kwargs
            ),
        }
    with warnings.catch_warnings():  # metrics_interval_s is "deprecated" but still the knob
        warnings.simplefilter("ignore", DeprecationWarning)
        return AutoscalingConfig(**common)
