"""``python -m bench.uvloop_run MODULE [ARGS...]``: run ``python -m MODULE`` under uvloop.

The bench's ``uvloop=1`` variant starts every stack process through this, so the event loop
is the only difference from the default variant.
"""

from __future__ import annotations

import runpy
import sys

import uvloop

if __name__ == "__main__":
    module, *rest = sys.argv[1:]
    sys.argv = [module, *rest]
    uvloop.install()
    runpy.run_module(module, run_name="__main__", alter_sys=True)
