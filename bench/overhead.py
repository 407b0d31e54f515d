"""Per-tensor overhead of a CPU optimizer step: 256 small tensors through octopt.Adam (NumPy) and
octopt.torch.AdamW against one tensor of the same total size, with torch.optim.Adam (foreach=False, fused)
as references. The implementation ships in the package (``octopt bench --overhead-only`` runs the same);
bench/README.md, "Per-step overhead", explains the method.

    PYTHONPATH=python python bench/overhead.py [--sizes 64 4096] [--bits 32 8] [--threads 1] [--out FILE]
"""

import sys

from octopt._bench.overhead import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
