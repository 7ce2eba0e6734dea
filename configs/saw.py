"""SAW (arXiv:2606.07705): batch coefficient-of-variation weights (Eqs. 2, 8), at reward level
(``mode=grpo``, Eq. 9) or advantage level (``mode=gdpo``, Eq. 10)::

    python -m mojax.main --config=configs/saw.py                 # reward level (saw_grpo)
    python -m mojax.main --config=configs/saw.py:mode=gdpo       # advantage level (saw_gdpo)
    python -m mojax.main --config=configs/saw.py:think=0.3   # + r_format (the SAW claim's setting)

``think=p`` adds the calculator's format objective ``r_format`` (a ``<think>`` plan first) and shows
a plan in a fraction ``p`` of the SFT demonstrations, so ``r_format`` starts low and is learned during
RL while ``r_task`` and ``r_tool`` start high (SAW Sec. 3.1). The SAW setting on the rule problem set
is ``think=0.3``: at 0.1 the plan context was trained on too few demonstrations and ``r_task`` was
lost to it (docs/results/saw_cv.md, -0.071); at 0.3 it was not (-0.008, 2 SE 0.024, 3 seeds) while
``r_format`` still started low and SAW learned it faster (docs/methods.md; pre-registered grid:
``experiments/saw_rule.py``).

Paper scale, from the Hugging Face directory of Qwen2.5-1.5B-Instruct (or Qwen2.5-3B-Instruct with
``model=qwen2.5-3b``) and ToolRL's rlla_4k parquet files::

    python -m mojax.main --workdir=/runs/saw_toolrl --config=configs/saw.py:paper=true,mode=gdpo,model=qwen2.5-1.5b,task=toolrl,checkpoint=/ckpt/Qwen2.5-1.5B-Instruct,train_path=/data/rlla_4k/train.parquet,eval_path=/data/rlla_4k/test.parquet
    python -m mojax.main --config=configs/saw.py:paper=true,mode=gdpo,model=qwen2.5-1.5b,task=toolrl,train_path=/data/rlla_4k/train.parquet,data=2,fsdp=4 \
      --config.dry_run=true   # shapes, shardings and memory per device on 8 devices

On the 8 accelerators of one host, decode in slots (continuous batching) to fit: add
``--config.sampler.engine=continuous --config.continuous.slots=256``. The dry run on 8 devices puts
the peak per device at 185.5 GiB with the static engine and 33.9 GiB with these slots.

``paper=true`` is SAW's ToolRL recipe (App. D, Table 4: "identical to ToolRL"), on ToolRL's
(format, correctness) rewards with the theoretical minima 0 and -3 as the CV offsets
(``mojax.defaults.toolrl_recipe``): 512 prompts x 4 samples per step, mini-batches of 128 prompts,
lr 1e-6, no KL loss (the table's KL coefficient 0.001 acts only through a KL loss or verl's
in-reward KL, both off), responses up to 1024 tokens, 15 epochs = 105 steps (``steps=N`` for another
corpus). Where Table 4 is silent the recipe takes verl's defaults (clip 0.2, weight decay 0.01, fp32
parameters under bf16 compute, temperature 1, token-mean loss, no entropy bonus: the paper does not
give verl's ``entropy_coeff``). Not reproduced: the 2048-token prompt cap (mojax keeps every prompt
and sizes the batch to the longest one) and BFCL-v4 evaluation (the held-out split is
``eval_path``). The Reddit TL;DR setting (App. I) needs an LLM judge task mojax does not ship.

Every config also takes ``lora=R`` (LoRA adapters of rank R, alpha 2R, on a frozen base;
``lora_quant=nf4`` or ``int8`` for QLoRA) and ``pack=true`` (sequence packing of the PPO and SFT
rows), e.g. --config=configs/saw.py:lora=64,lora_quant=nf4,pack=true ; the ``lora``
and ``packing`` sections hold the details (``--config.lora.targets``, ``--config.packing.width``).
"""

from mojax import defaults


def get_config(arg=None):
    a = defaults.parse_arg(arg, **defaults.COMMON_ARGS, mode="grpo")
    if a.mode not in ("grpo", "gdpo"):
        raise ValueError(f"configs/saw.py: mode={a.mode!r} is not one of ['grpo', 'gdpo']")
    c = defaults.base_config()
    defaults.apply_common_args(c, a)
    c.estimator = f"saw_{a.mode}"
    c.advantage = dict(fallback=True)  # reward_min: the task's declared minima (trainer)
    if a.paper:
        if a.task != "toolrl":
            raise ValueError(
                f"configs/saw.py: paper=true is SAW's ToolRL recipe (App. D); task={a.task!r} "
                "is not task=toolrl"
            )
        defaults.toolrl_recipe(c, a.steps)
    else:
        defaults.tiny_schedule(c, a.steps)
    return c.lock()
