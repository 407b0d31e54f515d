"""octopt.torch.AdamW8bit in a Hugging Face ``Trainer`` (``optimizers=(optimizer, None)``) on a tiny GPT-2
built from a config (nothing downloaded): it trains, the Trainer's learning-rate schedule reaches octopt's
step, and the state is octopt's 8-bit state. Skipped where transformers or accelerate is missing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer needs it


def test_trainer_steps_octopt_with_its_own_schedule(tmp_path):
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
    )
    model = transformers.GPT2LMHeadModel(config)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 8, (32, 16))]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=12,
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        lr_scheduler_type="linear",
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    opt = ot.AdamW8bit(model.parameters(), lr=args.learning_rate, min_8bit_size=0)
    ptrs = [p.data_ptr() for p in model.parameters()]
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, optimizers=(opt, None))
    seen_lrs = []
    opt.register_step_pre_hook(lambda o, *_: seen_lrs.append(o.param_groups[0]["lr"]))
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3]) - 0.3
    # the Trainer's linear schedule set the lr of octopt's groups before every step
    assert len(seen_lrs) == 12 and seen_lrs[0] == pytest.approx(3e-3) and seen_lrs == sorted(seen_lrs, reverse=True)
    assert [p.data_ptr() for p in model.parameters()] == ptrs  # updated in place
    emb = model.transformer.wte.weight
    assert opt.state[emb]["exp_avg"].dtype == torch.uint8 and float(opt.state[emb]["step"]) == 12
