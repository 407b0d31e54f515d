"""A torch.distributed.checkpoint written by octopt before state-dict format 2 (data/dcp_v1, made by
data/make_dcp_v1.py at commit 8a5cc8b: 8-bit state saved dequantized, as float32 DTensors) still loads, on the
2 ranks that wrote it and on 1: inside ``octopt.torch.dequantized_state_dict(opt)`` the state dict has that
form, and ``set_optimizer_state_dict`` quantizes the values on the optimizer's blocks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")


@pytest.fixture(scope="module")
def make_dcp_v1(import_file):
    from pathlib import Path

    return import_file(Path(__file__).parent / "data" / "make_dcp_v1.py")


def _full(sd: dict) -> dict:
    from torch.distributed.tensor import DTensor

    return {
        k: {n: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for n, v in e.items()}
        for k, e in sd["state"].items()
    }


def load_v1(ctx, path: str, script: str) -> dict:
    import importlib.util

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    spec = importlib.util.spec_from_file_location("make_dcp_v1", script)
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    model, opt = make.build()
    model_sd, optim_sd = get_state_dict(model, opt)
    refused = None
    try:  # the form of format 2 asks for codes and absmax, which the checkpoint does not hold
        dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
    except BaseException as e:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        refused = str(e)
    model, opt = make.build()
    with ot.dequantized_state_dict(opt):
        model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path)
    saved = _full(state["optim"])
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    with ot.dequantized_state_dict(opt):
        loaded = _full(get_state_dict(model, opt)[1])
    layout = opt.state_layout()
    x, y = make.batch(make.STEPS)
    before = float(torch.nn.functional.mse_loss(model(x), y))
    make.train(model, opt, range(make.STEPS, make.STEPS + 20))
    after = float(torch.nn.functional.mse_loss(model(x), y))
    return {"refused": refused, "saved": saved, "loaded": loaded, "layout": layout, "losses": (before, after)}


@pytest.mark.parametrize("world_size", (2, 1))
def test_a_checkpoint_of_the_dequantized_form_loads(launch, gloo, make_dcp_v1, world_size):
    import octopt

    r = launch(gloo, world_size, load_v1, str(make_dcp_v1.FIXTURE), make_dcp_v1.__file__)[0]
    assert r["refused"] is not None and "Missing key" in r["refused"] and "exp_avg_absmax" in r["refused"]
    assert [e["slots"]["exp_avg"]["bits"] for e in r["layout"]] == [8, 8, 8, 8]
    assert len(r["saved"]) == 4
    for fqn, entry in r["saved"].items():
        assert float(entry["step"]) == make_dcp_v1.STEPS
        for name in ("exp_avg", "exp_avg_sq"):
            v, w = entry[name], r["loaded"][fqn][name]
            assert v.dtype == torch.float32 and w.shape == v.shape
            levels = torch.tensor(octopt._octopt.state_map_values(8, name == "exp_avg"))
            bound = (0.5 * float(levels.sort().values.diff().max()) + 2**-22) * float(v.abs().max())
            assert float((w - v).abs().max()) <= bound, (fqn, name)
            assert float(v.abs().max()) > 0  # the fixture holds trained state
    before, after = r["losses"]
    assert after < before  # training continues from the loaded state


def new_form_read_as_float32(ctx, folder: str, script: str) -> str:
    import importlib.util

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    spec = importlib.util.spec_from_file_location("make_dcp_v1", script)
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    model, opt = make.build()
    make.train(model, opt, range(2))
    dcp.save(get_state_dict(model, opt)[1], checkpoint_id=f"{folder}/new")
    model, opt = make.build()
    with ot.dequantized_state_dict(opt):
        optim_sd = get_state_dict(model, opt)[1]
    dcp.load(optim_sd, checkpoint_id=f"{folder}/new")  # DCP turns the uint8 codes into float32 silently
    with pytest.raises(ValueError) as e:
        set_state_dict(model, opt, model_state_dict={}, optim_state_dict=optim_sd)
    return str(e.value)


def test_a_quantized_checkpoint_read_in_the_float32_form_is_refused(launch, gloo, make_dcp_v1, tmp_path):
    message = launch(gloo, 2, new_form_read_as_float32, str(tmp_path), make_dcp_v1.__file__)[0]
    assert "holds only whole numbers in [0, 255]: 8-bit codes of a checkpoint in the quantized form" in message
