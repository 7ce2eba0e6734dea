"""The matmul floor of a decode step: the model's dots alone, XLA CPU vs torch, alternating.

Per side (fresh process, default threads): the chain of matrix products one cached decode step of
``--variant`` does for ``--batch`` rows (per layer q, k, v, o, gate, up, down; then the vocabulary
head), on random fp32 weights, with nothing else (no attention, norms, activations, cache or
sampling), as one jitted function (jax) or eagerly (torch). Printed per side: ms per step and
GFLOP/s (min of ``--iters`` calls per process; min / median / max over ``--rounds`` processes), plus
a square ``--square`` fp32 product for each library's peak. A model step that costs about its
matmul floor cannot be made much faster without doing less arithmetic; this is the measurement
behind the CPU sampler target in ``docs/performance.md`` section 2.

``--mode train`` times the same chain forward and backward (the gradient of every weight, as a
train step computes it) at ``benchmarks/train_step.py``'s ``CPU_SHAPE`` with ``--batch`` = B * T
rows (default 8 * 128): the matmul floor of that benchmark's PPO step (section 4). The jax side
also times three other parts every such step has, alone: the optimizer update (mojax's AdamW with
global-norm clipping over the model's weights), the token log-prob forward and backward over the
``[B * T, V]`` logits (``mojax.models.qwen.token_logprobs``) and the causal attention's forward and
backward of all layers (``mojax.models.layers.attend``, B = 8 rows of T = rows / 8 tokens)::

    python benchmarks/matmul_floor.py                       # bench-qwen3-50m decode, B = 128
    python benchmarks/matmul_floor.py --mode train          # train_step.py's shape, 1024 rows
    python benchmarks/matmul_floor.py --variant tiny-qwen3 --batch 8 --square 256 --force  # smoke
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness  # noqa: E402


def _shape(args) -> dict:
    """The model dims: ``train_step.CPU_SHAPE`` in train mode, else the mojax ``--variant``."""
    if args.mode == "train":
        import train_step

        return dict(train_step.CPU_SHAPE)
    import mojax.models as mm

    c = mm.get_variant(args.variant)
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads")
    return {k: getattr(c, k) for k in (*keys, "num_kv_heads", "head_dim")}


def dot_shapes(shape: dict) -> list[tuple[int, int]]:
    """(in, out) of every weight matrix a step multiplies: per layer q, k, v, o, gate, up, down;
    then the vocabulary head."""
    e, f = shape["hidden_size"], shape["intermediate_size"]
    q, kv = shape["num_heads"] * shape["head_dim"], shape["num_kv_heads"] * shape["head_dim"]
    per_layer = [(e, q), (e, kv), (e, kv), (q, e), (e, f), (e, f), (f, e)]
    return per_layer * shape["num_layers"] + [(e, shape["vocab_size"])]


def _flops(shapes, b, mode="decode"):
    """Forward FLOPs; train mode adds the backward's two products per weight (input and weight
    gradients), less the first layer's q / k / v input gradients (the input needs none)."""
    fwd = 2 * b * sum(i * o for i, o in shapes)
    if mode != "train":
        return fwd
    return 3 * fwd - 2 * b * sum(i * o for i, o in shapes[:3])


def _weights(args):
    import numpy as np

    rng = np.random.RandomState(0)
    shapes = dot_shapes(_shape(args))
    ws = [(rng.randn(i, o) / np.sqrt(i)).astype(np.float32) for i, o in shapes]
    return ws, rng.randn(args.batch, shapes[0][0]).astype(np.float32), rng


def chain(h, ws):
    """The step's products with the model's data flow, for jax or torch arrays alike; elementwise
    glue only (no norms, attention or activations)."""
    for i in range(0, len(ws) - 1, 7):
        wq, wk, wv, wo, wg, wu, wd = ws[i : i + 7]
        q, k, v = h @ wq, h @ wk, h @ wv
        o = q @ wo + 1e-3 * (k.sum(-1) + v.sum(-1))[:, None]
        h = h + (o @ wg) * (o @ wu) @ wd
    return (h @ ws[-1]).sum()


def _train_extras(args, ws, rng) -> dict:
    """Seconds of the optimizer update, the log-prob and the attention forward + backward, each
    alone."""
    import jax
    import jax.numpy as jnp
    import optax

    from mojax import learner
    from mojax.models.layers import attend
    from mojax.models.qwen import token_logprobs

    shape = _shape(args)
    # the model's weights: the products' matrices, the input embedding, and the norm scales
    params = ws + [jnp.zeros((shape["vocab_size"], shape["hidden_size"]), jnp.float32)]
    params += [jnp.ones((shape["hidden_size"],), jnp.float32)] * (2 * shape["num_layers"] + 1)
    opt_config = learner.OptimizerConfig(learning_rate=1e-5, max_grad_norm=1.0, weight_decay=0.0)
    tx = learner.make_optimizer(opt_config)  # as benchmarks/train_step.py
    opt = tx.init(params)
    grads = [1e-3 * jnp.ones_like(p) for p in params]

    @jax.jit
    def update(params, opt, grads):
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt

    logits = jnp.asarray(rng.randn(args.batch, shape["vocab_size"]).astype("float32"))
    targets = jnp.asarray(rng.randint(0, shape["vocab_size"], args.batch))
    logp_grad = jax.jit(jax.grad(lambda z: jnp.sum(token_logprobs(z, targets))))
    b, h, k, d = 8, shape["num_heads"], shape["num_kv_heads"], shape["head_dim"]
    t = args.batch // b
    q = jnp.asarray(rng.randn(shape["num_layers"], b, t, k, h // k, d).astype("float32"))
    kv = jnp.asarray(rng.randn(2, shape["num_layers"], b, t, k, d).astype("float32"))
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (b, t, t))

    def attention(q, kv):  # every layer's attention (one call per layer, as unrolled), summed
        layers = range(shape["num_layers"])
        return sum(jnp.sum(attend(q[i], kv[0, i], kv[1, i], causal, jnp.float32)) for i in layers)

    attn_grad = jax.jit(jax.grad(attention, argnums=(0, 1)))
    return {
        "attention": _harness.time_calls(
            lambda: jax.block_until_ready(attn_grad(q, kv)), args.iters
        ),
        "optimizer": _harness.time_calls(
            lambda: jax.block_until_ready(update(params, opt, grads)), args.iters
        ),
        "logprobs": _harness.time_calls(
            lambda: jax.block_until_ready(logp_grad(logits)), args.iters
        ),
    }


def jax_worker(args):
    import jax
    import jax.numpy as jnp

    ws, x, rng = _weights(args)
    ws, x = [jnp.asarray(w) for w in ws], jnp.asarray(x)
    fn = jax.jit(jax.grad(chain, argnums=1) if args.mode == "train" else chain)
    step = _harness.time_calls(lambda: jax.block_until_ready(fn(x, ws)), args.iters)
    a = jnp.asarray(rng.randn(args.square, args.square).astype("float32"))
    sq = jax.jit(lambda a: a @ a)
    square = _harness.time_calls(lambda: sq(a).block_until_ready(), args.iters)
    extras = _train_extras(args, ws, rng) if args.mode == "train" else {}
    _harness.emit({"step": step, "square": square, **extras})


def torch_worker(args):
    import torch

    ws, x, rng = _weights(args)
    ws, x = [torch.from_numpy(w) for w in ws], torch.from_numpy(x)
    train = args.mode == "train"
    for w in ws:
        w.requires_grad_(train)

    def run():
        if train:
            for w in ws:
                w.grad = None
            loss = chain(x, ws)
            loss.backward()
            return float(loss.detach())
        with torch.no_grad():
            return float(chain(x, ws))

    step = _harness.time_calls(run, args.iters)
    a = torch.from_numpy(rng.randn(args.square, args.square).astype("float32"))
    square = _harness.time_calls(lambda: a @ a, args.iters)
    _harness.emit({"step": step, "square": square, "threads": torch.get_num_threads()})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_args(ap)
    ap.add_argument("--mode", choices=("decode", "train"), default="decode")
    ap.add_argument("--variant", default="bench-qwen3-50m", help="decode mode: a mojax variant")
    ap.add_argument("--batch", type=int, default=None, help="rows (default 128; train: 8 * 128)")
    ap.add_argument("--square", type=int, default=2048)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args(argv)
    if args.batch is None:
        args.batch = 1024 if args.mode == "train" else 128
    if args.worker:
        return {"jax": jax_worker, "torch": torch_worker}[args.worker](args)
    print(_harness.machine_info())
    _harness.check_load(args.force, args.rounds)
    shapes = dot_shapes(_shape(args))
    gflop = _flops(shapes, args.batch, args.mode) / 1e9
    what = "train_step.py CPU_SHAPE, forward + backward" if args.mode == "train" else args.variant
    print(f"{what}: {len(shapes)} weight products per step, {args.batch} rows, "
          f"{gflop:.2f} GFLOP per step; square {args.square}^3 fp32")  # fmt: skip
    argv = ["--mode", args.mode, "--variant", args.variant, "--batch", str(args.batch)]
    argv += ["--square", str(args.square), "--iters", str(args.iters)]
    env = _harness.worker_env({"JAX_PLATFORMS": "cpu"})
    runs = _harness.alternate(__file__, {"torch": argv, "jax": argv}, args.rounds, env)
    _harness.report(f"{args.mode}-step matmul chain", runs, "step", "torch", ["jax"])
    _harness.report(f"square {args.square} product", runs, "square", "torch", ["jax"])
    sq_gflop = 2 * args.square**3 / 1e9
    if args.mode == "train":
        for part in ("optimizer", "logprobs", "attention"):
            lo, med, hi = _harness.spread([1e3 * r[part] for r in runs["jax"]])
            print(f"  jax {part} alone (ms): min {lo:.2f} median {med:.2f} max {hi:.2f}")
    for side, res in runs.items():
        lo, med, hi = _harness.spread([gflop / r["step"] for r in res])
        slo, smed, shi = _harness.spread([sq_gflop / r["square"] for r in res])
        print(f"  {side}: {args.mode} chain GFLOP/s min {lo:.1f} median {med:.1f} max {hi:.1f}; "
              f"square GFLOP/s min {slo:.1f} median {smed:.1f} max {shi:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
