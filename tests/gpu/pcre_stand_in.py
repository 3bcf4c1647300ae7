"""A stand-in for PyPcre on the GPU proof machine only (tests/gpu/proof.sh copies it in as ``pcre``).

gptqmodel and defuser import ``pcre`` (PyPcre), which has no wheel for the machine's Python 3.12
and cannot be built there (no network, no PCRE2 headers). The patterns they use (module names,
shard file names, nvcc's version line) read the same in Python's ``re``; this module maps the few
names they call onto it. The workbench itself never uses it.
"""

import re
from re import Match, Pattern, compile, error, escape, findall, finditer, fullmatch, match, search, split, sub

__all__ = ["Flag", "Match", "Pattern", "compile", "error", "escape", "findall", "finditer", "fullmatch", "match",
           "search", "split", "sub"]


class Flag:
    CASELESS = re.IGNORECASE
    MULTILINE = re.MULTILINE
    DOTALL = re.DOTALL
    VERBOSE = re.VERBOSE
    UNICODE = re.UNICODE
