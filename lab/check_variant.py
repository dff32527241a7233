"""A faulty variant of Debian's e1000, made in a running driver process (docs/checking.md).

The variant writes into a receive buffer the device owns: in e1000_clean_rx_irq's
copybreak path (frames of at most 256 bytes) it drops the
dma_sync_single_for_cpu() that hands the buffer back to the CPU, and turns
the copy out of the buffer round (`memcpy(skb tail, data, len)` becomes
`memcpy(data, skb tail, len)`): three instruction changes, one bug of the kind
the DMA checker exists for. It is written into the running process, as the
lab's fault injection does (lab/swifi/inject.py), so the driver's successor,
loaded from disk, is clean: a verdict and a recovery, then a healthy driver.

The process runs the module rewritten for checking, so offsets in the file
mean nothing there; the changed instructions and the probe between them
are found by their pattern in the rewritten text (exactly one match, or
nothing is written).

Run in the guest, as root:  python3 -m lab.check_variant PID
"""
from __future__ import annotations

import argparse
import json
import re
import sys

from .errors import LabError
from .swifi.faults import Fault, Patch
from .swifi.inject import ProcessMemory, inject_process, process_sections

MODULE = "e1000"
# call dma_sync_single_for_cpu; mov %r13d,%esi; mov %r14,%rdi; call skb_put;
# [a stack probe, unless the rewriter found the slot written already]
# mov 0x28(%rsp),%rsi; mov %r13,%rdx; mov %rax,%rdi; call memcpy  (Debian 6.1's e1000.ko)
COPYBREAK = re.compile(rb"(?P<sync>\xe8....)\x44\x89\xee\x4c\x89\xf7\xe8...."
                       rb"(?:\x57\x48\x8d\xbc\x24\x30\x00\x00\x00\xe8....\x5f)?"
                       rb"(?P<src>\x48\x8b\x74\x24\x28)\x4c\x89\xea(?P<dst>\x48\x89\xc7)\xe8", re.S)
NOP5 = bytes.fromhex("0f1f440000")


def patches(text: bytes) -> list[Patch]:
    """The variant's changes, as offsets in the rewritten .text."""
    found = list(COPYBREAK.finditer(text))
    if len(found) != 1:
        raise LabError(f"e1000's copybreak copy found {len(found)} times in the rewritten text, "
                       "not once: another e1000 build?")
    sync, src, dst = (found[0].start(group) for group in ("sync", "src", "dst"))
    return [
        Patch(".text", sync, text[sync:sync + 5], NOP5, "e1000_clean_rx_irq", 0,
              "call dma_sync_single_for_cpu", "nop"),
        Patch(".text", src, text[src:src + 5], bytes.fromhex("488b7c2428"), "e1000_clean_rx_irq", 0,
              "mov 0x28(%rsp),%rsi", "mov 0x28(%rsp),%rdi"),
        Patch(".text", dst, text[dst:dst + 3], bytes.fromhex("4889c6"), "e1000_clean_rx_irq", 0,
              "mov %rax,%rdi", "mov %rax,%rsi"),
    ]


def rewritten_text(pid: int) -> bytes:
    """The process's e1000 .text: from its address to the next section's."""
    sections = process_sections(pid, MODULE)
    start = sections[".text"]
    end = min((a for a in sections.values() if a > start), default=start + (4 << 20))
    with ProcessMemory(pid) as mem:
        return mem.read(start, end - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m lab.check_variant", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pid", type=int, help="the driver process running e1000")
    args = p.parse_args(argv)
    try:
        fault = Fault(MODULE, "", "check-variant", 0, patches(rewritten_text(args.pid)))
        print(json.dumps(inject_process(args.pid, fault)))
    except LabError as e:
        print(f"check_variant: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
