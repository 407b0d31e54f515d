"""bitsandbytes' state-dict key map, shared by octopt.torch (which imports bitsandbytes' state dicts) and
octopt.bnb (which writes them): where bitsandbytes keeps each of octopt's state slots."""

NESTED = "__bnb_optimizer_quant_state__"  # bitsandbytes >= 0.45 nests its quantization tensors here
# Where bitsandbytes keeps each of octopt's state slots: (its state number, the row of a two-row state).
# bitsandbytes' 8-bit maps are octopt's dynamic maps, except that its one-state optimizers quantize
# RMSprop's and Adagrad's (non-negative) state with the signed map: octopt.torch requantizes those on
# import (octopt.bnb keeps bitsandbytes' map and takes the codes as they are).
# A slot absent here (RMSprop's momentum or centering) starts afresh.
_ADAM = {"exp_avg": ("1", None), "exp_avg_sq": ("2", None)}
_MOMENTUM = {"momentum_buffer": ("1", None)}
SLOTS = {
    "adam": _ADAM,
    "adamw": _ADAM,
    "lamb": _ADAM,
    "sgd": _MOMENTUM,
    "lars": _MOMENTUM,
    "lion": {"exp_avg": ("1", None)},
    "rmsprop": {"square_avg": ("1", None)},
    "adagrad": {"sum": ("1", None)},
    "ademamix": {"m1": ("1", 0), "m2": ("1", 1), "nu": ("2", None)},
}
# Per-tensor keys of a bitsandbytes state that carry nothing octopt's state holds: the norm of the last
# update (max_unorm) and the history of gradient norms (percentile_clipping; octopt.bnb imports it itself).
IGNORED_STATE = ("unorm_vec", "gnorm_vec")
