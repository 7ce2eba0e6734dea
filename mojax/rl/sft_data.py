"""SFT warm-start data: demonstrations as fixed-shape ``tokens`` / ``loss_mask`` arrays.

* calculator: the generated mixed-behaviour transcripts (``sft_demonstrations``), tool observations
  masked out of the loss;
* maze: BFS-solver routes (direct, via gold, via diamond; ``mojax.tasks.maze_sft``), a
  single-answer and an S-route demonstration per maze, each after its own prompt;
* file-backed tasks with gold responses (ToolRL's ``rlla_sft.json``): the chat-template prompt, then
  the gold response and the end-of-turn token (loss on the response only).
"""

from __future__ import annotations

import numpy as np

from mojax.tasks.base import Task


def sft_arrays(config, task: Task, tokenizer, train_examples) -> tuple[np.ndarray, np.ndarray]:
    """``tokens int32 [N, T]`` and ``loss_mask float32 [N, T]`` (T = longest demo, right-padded)."""
    n = int(config.sft.num_examples)
    eos = int(tokenizer.eos_token_id)
    rows: list[tuple[list[int], list[int]]] = []
    if config.task.name == "calculator":
        from mojax.tasks.calculator import sft_demonstrations, tokenize_demo

        demos = sft_demonstrations(
            train_examples[:n],
            seed=int(config.seed),
            behaviours=dict(config.sft.behaviours),
            think_rate=float(config.sft.think_rate),
        )
        rows = [tokenize_demo(d, tokenizer, end_token_id=eos) for d in demos]
    elif config.task.name == "maze":
        rows = _maze_rows(config, task, tokenizer, train_examples[:n], eos)
    else:
        if not config.sft.data_path:
            raise ValueError(
                f"config.sft.data_path: SFT on task {config.task.name!r} needs a demonstrations file"
            )
        for ex in list(task.load(config.sft.data_path))[:n]:
            target = ex.target if isinstance(ex.target, str) else str(ex.target)
            rows.append(_row(tokenizer, task.build_prompt(ex, tokenizer), target, eos))
    if not rows:
        raise ValueError("config.sft: no demonstrations were built")
    width = max(len(ids) for ids, _ in rows)
    tokens = np.full((len(rows), width), int(tokenizer.pad_token_id), np.int32)
    mask = np.zeros((len(rows), width), np.float32)
    for i, (ids, m) in enumerate(rows):
        tokens[i, : len(ids)] = ids
        mask[i, : len(m)] = m
    return tokens, mask


def _row(tokenizer, prompt_text: str, response_text: str, eos: int):
    """``(ids, loss_mask)``: the prompt (mask 0), then the response and ``eos`` (mask 1)."""
    prompt = list(tokenizer.encode(prompt_text))
    resp = list(tokenizer.encode(response_text)) + [eos]
    return prompt + resp, [0] * len(prompt) + [1] * len(resp)


def _maze_rows(config, task: Task, tokenizer, examples, eos: int):
    """Two rows per maze (single answer, S routes; ``maze_sft.demo_pairs``)."""
    from mojax.tasks.maze_sft import demo_pairs

    pairs = demo_pairs(task, examples, tokenizer, int(config.task.num_answers), int(config.seed))
    return [_row(tokenizer, prompt, text, eos) for prompt, text in pairs]


def sft_batches(tokens: np.ndarray, mask: np.ndarray, batch_size: int, step: int, seed: int):
    """The SFT batch of ``step``: a deterministic epoch-wise permutation (resumable by step)."""
    n = tokens.shape[0]
    if batch_size > n:
        raise ValueError(f"config.sft.batch_size={batch_size} > number of demonstrations {n}")
    per_epoch = n // batch_size
    epoch, i = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    idx = order[i * batch_size : (i + 1) * batch_size]
    # right-padded and causal: real tokens never attend to the trailing padding, so no attention
    # mask is needed (the padding is also out of the loss)
    return {"tokens": tokens[idx], "loss_mask": mask[idx]}
