"""Any other vLLM engine argument, passed through (``engine.vllm.engine_args``) and checked by
vLLM's own engine parser when the config loads.

::

    {kv_cache_dtype: fp8, speculative_config: {method: ngram, ...}}
        │ engine_args_argv: True → --x, False → --no-x, mapping → JSON, list → one token each
        ▼
    ["--kv-cache-dtype", "fp8", "--speculative-config", "{...}"]
        │ AsyncEngineArgs.add_cli_args(FlexibleArgumentParser()) (the pinned vLLM's parser)
        ├─► check_engine_args: each key's option exists, its tokens parse (type, choices)
        ├─► engine_kwargs_of: the parsed values, merged into AsyncEngineArgs (in-process)
        └─► appended to the server argv (bare ``vllm serve`` and the replica's OpenAI layer)

Contract
- ``check_engine_args(args)`` returns ``args`` unchanged or raises ``EngineArgsError`` with
  one ``(key, reason)`` per bad key: a key llmfleet sets itself (``MANAGED``, refused with
  the typed field to use instead — also without vLLM), an unknown key (with close matches),
  an alias (named by the option's own key), or a value vLLM's parser rejects, parsed from
  exactly the tokens the server gets (``quantization`` must be a method vLLM registers).
- Where vLLM cannot be imported (the simulated engine's machines), only the managed-key and
  value-shape checks run; the engine process parses the same tokens again when it starts.
- The parser is built once per process (vLLM's import takes seconds, so only a config with
  engine arguments pays for it).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
from typing import Any

# Keys llmfleet sets itself, and what to do instead.
MANAGED: dict[str, str] = {
    "model": "use model.path",
    "tokenizer": "use model.path (the model directory's own tokenizer)",
    "served_model_name": "use model.served_name",
    "max_model_len": "use model.max_model_len",
    "tool_call_parser": "use model.tool_call_parser",
    "chat_template": "use model.chat_template",
    "tensor_parallel_size": "use engine.tensor_parallel_size",
    "distributed_executor_backend": "use engine.tensor_parallel_size (ray when > 1)",
    "pipeline_parallel_size": "use engine.tensor_parallel_size (a replica's placement group holds its TP workers only)",
    "data_parallel_size": "use replicas.num_replicas or autoscaling (llmfleet scales out by replicas)",
    "enforce_eager": "use engine.vllm.enforce_eager",
    "dtype": "use engine.vllm.dtype",
    "kv_cache_memory_bytes": "use engine.vllm.kv_cache_gib",
    "block_size": "use engine.vllm.block_size",
    "max_num_seqs": "use engine.vllm.max_num_seqs",
    "max_num_batched_tokens": "use engine.vllm.max_num_batched_tokens",
    "enable_prefix_caching": "use engine.vllm.enable_prefix_caching",
    "seed": "use engine.vllm.seed",
    "gpu_memory_utilization": "use engine.vllm.gpu_memory_utilization",
    "kv_events_config": "use engine.vllm.kv_events (or routing.policy prefix-precise)",
    "enable_chunked_prefill": "kept true: the prefill accounting assumes chunked prefill",
    "disable_log_stats": "kept false: routing and autoscaling read vLLM's per-step stats",
    "host": "use server.host",
    "port": "use server.port",
}

_SCALARS = (str, int, float, bool, type(None))


class EngineArgsError(ValueError):
    """Engine arguments vLLM would not accept; ``errors`` holds ``(key, reason)`` pairs."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{key}: {reason}" for key, reason in errors))


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _tokens(key: str, value: Any, action: argparse.Action | None) -> list[str]:
    """The CLI tokens for one argument (``action``: its option in vLLM's parser, if known)."""
    if isinstance(value, bool):
        if isinstance(action, argparse.BooleanOptionalAction) or action is None:
            return [_flag(key) if value else "--no-" + key.replace("_", "-")]
        return [_flag(key)] if value else []  # store_true / optional-value flags
    if isinstance(value, dict):
        return [_flag(key), json.dumps(value)]
    if isinstance(value, list | tuple):
        return [_flag(key), *(json.dumps(v) if isinstance(v, dict) else str(v) for v in value)]
    return [_flag(key), str(value)]


def engine_args_argv(args: dict[str, Any]) -> list[str]:
    actions = _actions()
    argv: list[str] = []
    for key, value in args.items():
        argv += _tokens(key, value, actions.get(key) if actions else None)
    return argv


@functools.lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser | None:
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        return None
    return AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())


@functools.lru_cache(maxsize=1)
def _actions() -> dict[str, argparse.Action] | None:
    """Long option (as a snake_case key, ``--no-x`` included) → its action."""
    parser = _parser()
    if parser is None:
        return None
    return {
        opt[2:].replace("-", "_"): action
        for action in parser._actions
        for opt in action.option_strings
        if opt.startswith("--")
    }


def _shape_error(value: Any) -> str | None:
    if isinstance(value, _SCALARS):
        return None
    if isinstance(value, list | tuple):
        return next((e for e in map(_shape_error, value) if e), None)
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return "mapping keys must be strings"
        return next((e for e in map(_shape_error, value.values()) if e), None)
    return f"{type(value).__name__} is not a YAML scalar, list or mapping"


def _unknown(key: str, actions: dict[str, argparse.Action]) -> str:
    options = sorted({a.dest for a in actions.values()})
    close = difflib.get_close_matches(key, options, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"not an argument of vLLM's engine{hint}"


def _value_error(key: str, value: Any, action: argparse.Action, parser: Any) -> str | None:
    """Parse ``value`` from the tokens the server would get, as vLLM's parser does."""
    if action.nargs == 0:  # --x / --no-x, or a store_true flag
        return None if isinstance(value, bool) else f"a flag: expects true or false, got {value!r}"
    if isinstance(value, bool):
        return None if action.nargs == "?" else f"expects a value, got {value!r}"
    if action.nargs in (None, "?") and isinstance(value, list | tuple):
        return f"expects one value, got a list {value!r}"
    try:  # type conversion and choices, exactly as parse_args applies them
        parser._get_values(action, _tokens(key, value, action)[1:])
    except (argparse.ArgumentError, argparse.ArgumentTypeError, ValueError, TypeError) as err:
        return " ".join((getattr(err, "message", None) or str(err)).split())[:400]
    if key == "quantization" and value is not None:
        from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

        if value not in QUANTIZATION_METHODS:
            return f"{value!r} is not a quantization method of this vLLM (choose from {', '.join(QUANTIZATION_METHODS)})"
    if key == "speculative_config" and isinstance(value, dict):
        return _speculative_error(value)
    return None


def _speculative_error(value: dict[str, Any]) -> str | None:
    """vLLM parses ``speculative_config`` as bare JSON and builds ``SpeculativeConfig`` at
    engine start; check its keys and each value against that class's fields now."""
    from typing import Annotated

    from pydantic import TypeAdapter, ValidationError
    from vllm.config import SpeculativeConfig

    fields: dict[str, Any] = getattr(SpeculativeConfig, "__pydantic_fields__", {})
    for name, item in value.items():
        info = fields.get(name)
        if info is None:
            close = difflib.get_close_matches(name, list(fields), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            return f"{name!r} is not a SpeculativeConfig field{hint}"
        try:
            kind: Any = info.annotation
            if info.metadata:  # constraints such as gt=0
                kind = Annotated[(kind, *info.metadata)]
            TypeAdapter(kind).validate_python(item)
        except ValidationError as err:
            return f"{name}: {err.errors()[0]['msg']}"[:400]
    return None


def _key_error(key: Any, value: Any) -> str | None:
    if not isinstance(key, str) or not key.isidentifier():
        return "keys are vLLM engine argument names in snake_case (e.g. kv_cache_dtype)"
    if key in MANAGED:
        return f"set by llmfleet; {MANAGED[key]}"
    shape = _shape_error(value)
    if shape:
        return shape
    parser, actions = _parser(), _actions()
    if parser is None or actions is None:
        return None  # no vLLM here: the engine process checks it when it starts
    action = actions.get(key)
    if action is None:
        return _unknown(key, actions)
    if action.dest != key:
        if action.dest in MANAGED:
            return f"an alias of {action.dest}, set by llmfleet; {MANAGED[action.dest]}"
        if key == "no_" + action.dest:
            return f"write {action.dest}: false"
        return f"an alias: write it as {action.dest}"
    return _value_error(key, value, action, parser)


def check_engine_args(args: dict[str, Any]) -> dict[str, Any]:
    errors = [(str(k), e) for k, v in args.items() if (e := _key_error(k, v)) is not None]
    if errors:
        raise EngineArgsError(errors)
    return args


def engine_kwargs_of(args: dict[str, Any]) -> dict[str, Any]:
    """The values ``AsyncEngineArgs`` gets, parsed by vLLM's parser from the same tokens the
    server gets (as ``vllm serve`` builds its engine arguments); needs vLLM."""
    if not args:
        return {}
    parser = _parser()
    if parser is None:
        raise RuntimeError("engine arguments need vLLM installed")
    namespace = parser.parse_args(engine_args_argv(check_engine_args(args)))
    return {key: getattr(namespace, key) for key in args}
