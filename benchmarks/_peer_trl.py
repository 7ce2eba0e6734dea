"""TRL's side of ``benchmarks/rl_step_peers.py``: ``trl.GRPOTrainer`` with transformers generation.

Runs under its own virtualenv (``/work/venvs/trl``: torch CPU, transformers, trl), or any Python
with torch and transformers plus trl's pure-Python wheels on ``PYTHONPATH`` (the GPU suite). One
``trainer.train()`` of ``--warmup + --steps`` optimizer steps; each step generates P x G
completions (``per_device_train_batch_size = generation_batch_size = P * G``,
``num_generations = G``, one step per generation; with ``--micro_rows R``,
``per_device_train_batch_size = R`` and ``gradient_accumulation_steps = steps_per_generation =
P x G / R``, so one generation batch of P x G is still one optimizer step), scores them with the
shared Python reward (``completion_ids``), and takes one AdamW step (``beta = 0``: no reference
model; ``loss_type`` TRL's default "dapo", token-mean; ε 0.2; constant lr; max grad norm 1).

``--trl_device cuda`` (``benchmarks/gpu_suite.sh``): the same on the GPU, bf16 mixed precision
(fp32 weights, ``bf16=True``), the clocks read after ``torch.cuda.synchronize``.

Timed without touching TRL's code: ``generation`` wraps the model's ``generate`` (the call TRL
makes), ``update`` is the rest of the optimizer step after ``_generate_and_score_completions``
returns (the loss forward, backward and AdamW step), ``step`` is callback ``on_step_begin`` to
``on_step_end``.
"""

from __future__ import annotations

import _harness
from _peer_common import EOS_ID, StepTimer, ids_to_text, load_inputs, now, reward_of_ids


def main(args) -> None:
    import datasets
    import torch
    import transformers
    import trl

    cuda = getattr(args, "trl_device", "cpu") == "cuda"  # bf16 mixed precision on the GPU
    sync = torch.cuda.synchronize if cuda else (lambda: None)  # the clocks read finished work
    inp = load_inputs(args.ckpt)
    prompts, g, n = inp["prompts"], inp["num_samples"], inp["max_new_tokens"]
    p = len(prompts)
    tok = transformers.AutoTokenizer.from_pretrained(args.ckpt)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.ckpt, dtype=torch.float32)
    texts = [ids_to_text(x) for x in prompts]
    assert tok(texts[0], add_special_tokens=False)["input_ids"] == prompts[0], "tokenizer mismatch"
    gen_kwargs = {"min_new_tokens": n} if args.dist == "fixed" else {}
    total = args.warmup + args.steps
    micro = args.micro_rows or p * g  # rows per forward / backward; P x G per optimizer step
    cfg = trl.GRPOConfig(
        output_dir=args.ckpt + "/trl_out", per_device_train_batch_size=micro, num_generations=g,
        gradient_accumulation_steps=p * g // micro, steps_per_generation=p * g // micro,
        max_completion_length=n,
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, epsilon=0.2, learning_rate=inp["lr"],
        lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0, max_steps=total,
        shuffle_dataset=False, logging_steps=1, report_to="none", save_strategy="no",
        use_cpu=not cuda, bf16=cuda, fp16=False, disable_dropout=True, seed=inp["seed"],
        generation_kwargs=gen_kwargs, dataloader_num_workers=0,
    )  # fmt: skip
    lengths: list[float] = []

    def reward(prompts=None, completions=None, completion_ids=None, **_):
        lengths.append(sum(len(c) for c in completion_ids) / len(completion_ids))
        return [reward_of_ids(c) for c in completion_ids]

    ds = datasets.Dataset.from_dict({"prompt": texts})
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=reward, args=cfg, train_dataset=ds, processing_class=tok
    )
    marks: dict[str, float] = {}
    gen_time = [0.0]
    timer = StepTimer()
    generate = trainer.model.generate

    def timed_generate(*a, **kw):
        t = now()
        out = generate(*a, **kw)
        sync()
        gen_time[0] += now() - t
        return out

    trainer.model.generate = timed_generate
    score = trainer._generate_and_score_completions

    def timed_score(*a, **kw):
        out = score(*a, **kw)
        marks["scored"] = now()
        return out

    trainer._generate_and_score_completions = timed_score

    class Clock(transformers.TrainerCallback):
        def on_step_begin(self, *a, **kw):
            gen_time[0] = 0.0
            marks["begin"] = now()

        def on_step_end(self, *a, **kw):
            sync()
            end = now()
            timer.add(gen_time[0], end - marks["scored"], end - marks["begin"],
                      response_len=lengths[-1])  # fmt: skip

    trainer.add_callback(Clock())
    trainer.train()
    assert len(timer.rows) == total, f"{len(timer.rows)} steps timed, expected {total}"
    _harness.emit(timer.result(args.warmup, side="trl", torch=torch.__version__,
                               trl=trl.__version__, threads=torch.get_num_threads(),
                               eos_id=EOS_ID, micro_rows=micro))  # fmt: skip
