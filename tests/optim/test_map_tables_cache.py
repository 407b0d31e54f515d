"""The per-thread cache of prepared map tables (closed form, byte tables) never hands a step tables of
another map: whatever maps a thread prepared before, a step's results stay the same."""

import numpy as np

import octopt


def _adam_run(n: int = 9000, steps: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    p = rng.standard_normal(n).astype(np.float32)
    opt = octopt.Adam([p], bits=8, lr=1e-2)
    for _ in range(steps):
        opt.step([rng.standard_normal(n).astype(np.float32)])
    out = [p]
    for st in opt.state_dict()["state"]:
        for slot in st["slots"].values():
            out += [slot["data"], slot["absmax"]]
    return out


def test_steps_do_not_depend_on_maps_used_before(restore_threads):
    octopt.set_num_threads(1)  # everything on this thread, whose cache the quantize calls fill
    reference = _adam_run()
    rng = np.random.default_rng(3)
    x = rng.standard_normal(4096).astype(np.float32)
    others = [octopt.quantile_map(x * (k + 1) + k) for k in range(16)]
    for after in range(12):
        # a cache full of other maps, then the first moment's map (the default signed dynamic map), then
        # `after` other maps: for some count the step finds m's map cached and must add v's without
        # replacing the tables it is about to use for m
        for q in others[:8]:
            octopt.quantize_blockwise(x, qmap=q, block_size=256)
        octopt.quantize_blockwise(x, block_size=256)
        for q in others[8 : 8 + after]:
            octopt.quantize_blockwise(x, qmap=q, block_size=256)
        for got, want in zip(_adam_run(), reference, strict=True):
            np.testing.assert_array_equal(got, want, err_msg=f"with {after} other maps after m's")
