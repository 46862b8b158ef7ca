"""Option values several commands share: the backends, a shard K/N, the export-health thresholds."""

from __future__ import annotations

import click

from ..gate.cells import BACKENDS, parse_shard
from ..gate.health import Thresholds
from .output import fail

FORMATS = BACKENDS


def shard_option(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, int]:
    try:
        return parse_shard(value)
    except ValueError as error:
        fail(f"--shard: {error}")
        raise


def backends_option(_ctx: click.Context, _param: click.Parameter, value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in FORMATS]
    if unknown or not names:
        fail(f"--backends: unknown backend(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(FORMATS)}")
    return list(dict.fromkeys(names))


def health_thresholds_option(_ctx: click.Context, _param: click.Parameter, value: str) -> Thresholds:
    try:
        return Thresholds.parse(value)
    except ValueError as error:
        fail(f"--health-thresholds: {error}")
        raise
