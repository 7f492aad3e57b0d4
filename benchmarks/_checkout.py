"""Makes a benchmark measure the checkout it sits in.

Run as ``python benchmarks/<script>.py``, a script has ``benchmarks/`` on its path, not the
repository: ``import optax_compat`` would take whichever copy pip installed last (an editable
install of another clone, or a release), and the table would describe that code. Importing this
module first puts this checkout's root ahead of the installed packages, for the script and for
the worker processes it starts (they run the same script).
"""

import pathlib
import sys

ROOT = str(pathlib.Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(1, ROOT)
