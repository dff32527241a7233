# SPDX-License-Identifier: GPL-2.0
"""Command-line arguments the lab's scenario commands share (`python3 -m lab
scenario crash-loop | leak-check | update-loop`)."""
from __future__ import annotations

import argparse


def parse_size(text: str) -> int:
    """500M, 60M, 2G, 1000000 → bytes (K/M/G are binary)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        n = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 500M, 2G, 1000000)") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return int(n)


def positive(text: str) -> int:
    n = int(text)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return n


def add_driver(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--driver", default="e1000", help="e1000, pcnet32 or rtl8139/8139cp (default e1000)")


def add_nic_props(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nic-props", default="", metavar="PROPS",
                        help="more QEMU -device properties for the NIC, e.g. autonegotiation=off "
                        "(QEMU's e1000 then has link at once after its driver resets the PHY, "
                        "instead of emulating 500 ms of autonegotiation)")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
