"""Optimizer-step benchmark: octopt Adam/AdamW (32/8/4-bit state) against torch.optim.Adam (fused, foreach),
bitsandbytes' Adam8bit, torchao's AdamW8bit and optax's jitted adam on the CPU, with a STREAM bandwidth floor
and a peak-memory row. The implementation ships in the package (``octopt bench`` runs the same); this script
only puts the results under bench/results/<timestamp>/ by default.

    PYTHONPATH=/tmp/site-x python bench/step.py [--quick] [--sizes 2^24 2^24x256] [--memory-only] [--out DIR]
"""

import os
import sys

from octopt._bench.step_cmd import main

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.exit(main(sys.argv[1:], default_root=os.path.join(here, "results")))
