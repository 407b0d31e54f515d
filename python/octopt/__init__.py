"""octopt: framework-neutral block-wise quantized optimizer states."""

from ._octopt import version as _version
from .functional import dequantize_blockwise, quantize_blockwise
from .maps import dynamic_map, fp8_map, linear_map, log2_map, quantile_map
from .optimizer import Optimizer
from . import family as _family
from .family import *  # noqa: F403 - one class per optimizer of the core's table
from .runtime import c_library, cmake_dir, cuda_available, cuda_built, get_num_threads, info, set_num_threads
from .state_file import StateFileError

__version__ = _version()

__all__ = [
    *_family.__all__,
    "Optimizer",
    "__version__",
    "c_library",
    "cmake_dir",
    "cuda_available",
    "cuda_built",
    "dequantize_blockwise",
    "dynamic_map",
    "fp8_map",
    "get_num_threads",
    "info",
    "linear_map",
    "log2_map",
    "quantile_map",
    "quantize_blockwise",
    "set_num_threads",
    "StateFileError",
]
