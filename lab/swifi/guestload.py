# SPDX-License-Identifier: GPL-2.0
"""A fault-injection trial's application workload, run inside the guest.

Two hash-checked TCP transfers at once (guest → host and host → guest,
lab/workload.py's bulk) and a ping running alongside; afterwards a short ping
shows whether the NIC still carries traffic.  Prints one JSON object.

    python3 -m lab.swifi.guestload --host 10.0.2.2 --tx-port P --rx-port P --bytes N
"""
from __future__ import annotations

import argparse
import json
import sys
import threading

from .. import workload


def run(host: str, tx_port: int, rx_port: int, nbytes: int, timeout: float) -> dict:
    results: dict[str, dict] = {}

    def transfer(name: str, port: int, send: bool) -> None:
        try:
            results[name] = workload.bulk_connect(host, port, send, nbytes, timeout)
        except OSError as e:
            results[name] = {"bytes": 0, "error": f"{type(e).__name__}: {e}", "resets": 0}

    threads = [threading.Thread(target=transfer, args=("tx", tx_port, True)),
               threading.Thread(target=transfer, args=("rx", rx_port, False))]
    for t in threads:
        t.start()
    during = workload.ping(host, count=40, interval=0.1)
    for t in threads:
        t.join()
    after = workload.ping(host, count=10, interval=0.05)
    return {**results, "ping": during, "ping_after": after}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m lab.swifi.guestload", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="10.0.2.2", help="the host's address seen from the guest")
    p.add_argument("--tx-port", type=int, required=True, help="host port receiving from the guest")
    p.add_argument("--rx-port", type=int, required=True, help="host port sending to the guest")
    p.add_argument("--bytes", type=int, required=True, help="bytes each way")
    p.add_argument("--timeout", type=float, default=20, help="a transfer's inactivity limit (s)")
    a = p.parse_args(argv)
    json.dump(run(a.host, a.tx_port, a.rx_port, a.bytes, a.timeout), sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
