"""The guarded fleet of test_protection.py and test_limits_and_shedding.py: 2 simulated
replicas × 4 slots, 8 queued at the one ingress, a key file with an admin key, a user key and
one key per quota, an allowed browser origin. Each module deploys its own (``guarded_app`` in
conftest.py), so one module's quota use never reaches the other's."""

from __future__ import annotations

from pathlib import Path

from cluster.keys import KeyLimits, add_key
from experiments.chaos.overload import fleet_config
from tests.serve_fixtures import deploy_app

MODEL = "smollm2-135m-instruct"
KEYS: dict[str, str] = {}
BODY_TIMEOUT_S = 5.0  # the 8 MiB body of test_big_bodies... arrives in ~0.1 s
APP_ORIGIN = "https://chat.example.com"  # a browser app allowed by server.cors_allowed_origins


def deploy_guarded(keys_dir: Path) -> None:
    path = keys_dir / "keys.yaml"
    KEYS["admin"] = add_key(path, "ops", admin=True)
    KEYS["user"] = add_key(path, "app")
    KEYS["rpm"] = add_key(path, "small", limits=KeyLimits(requests_per_min=3))
    KEYS["streams"] = add_key(path, "one", limits=KeyLimits(max_streams=1))
    KEYS["tpm"] = add_key(path, "few-tokens", limits=KeyLimits(tokens_per_min=100))
    cfg = fleet_config(
        api_keys_file=str(path), body_timeout_s=BODY_TIMEOUT_S, cors_allowed_origins=[APP_ORIGIN]
    )
    deploy_app(cfg, timeout_s=180)


def auth(who: str) -> dict[str, str]:
    if who == "none":
        return {}
    if who == "wrong":
        return {"authorization": "Bearer sk-llmfleet-not-a-key"}
    return {"authorization": f"Bearer {KEYS[who]}"}


def completion(**kw: object) -> dict[str, object]:
    return {"model": MODEL, "prompt": "hello there", "max_tokens": 4, **kw}
