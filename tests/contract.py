# SPDX-License-Identifier: GPL-2.0
"""Constants and offsets of the C contract headers (include/understudy/),
for tests that read shared memory or exit statuses: taken from the headers
by compiling a line of C against them, as the Rust mirrors' layout tests do
(host/cheader), so that no test keeps a copy that could drift."""

import functools
import re
import subprocess
import tempfile
from pathlib import Path

INCLUDE = Path(__file__).resolve().parent.parent / "include" / "understudy"


@functools.cache
def define(header: str, name: str) -> int:
    """The value of `#define NAME ...` in `header`: an integer expression of
    literals, shifts, ors and sums, read from the text, so that it can be
    read where no C compiler is (a lab guest)."""
    text = (INCLUDE / header).read_text()
    match = re.search(rf"^#define\s+{name}\s+(.+?)\s*(/\*.*)?$", text, re.MULTILINE)
    if match is None:
        raise KeyError(f"{header} defines no {name}")
    expression = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", match.group(1))
    if not re.fullmatch(r"[0-9a-fA-Fx()<>|+ ]+", expression):
        raise ValueError(f"{header}: {name} is not a plain integer expression: {match.group(1)}")
    return int(eval(expression))  # only literals and operators, checked above


@functools.cache
def value(header: str, expression: str) -> int:
    """The value of a C expression over `header` (e.g. "trace.h",
    "offsetof(struct us_trace_header, head)")."""
    program = (f'#include <stddef.h>\n#include <stdio.h>\n#include "{INCLUDE / header}"\n'
               f"int main(void) {{ printf(\"%llu\", (unsigned long long)({expression})); return 0; }}\n")
    with tempfile.TemporaryDirectory() as tmp:
        source, binary = Path(tmp) / "value.c", Path(tmp) / "value"
        source.write_text(program)
        subprocess.run(["cc", "-o", str(binary), str(source)], check=True, capture_output=True, text=True)
        return int(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)
