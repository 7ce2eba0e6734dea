"""Run plumbing: the workdir contract (``workdir``), its lock (``workdir_lock``) and the restore of a
damaged ``config.json`` (``workdir_restore``); orbax checkpoints (``checkpoint``), their damage verdicts
(``checkpoint_damage``) and failed saves (``checkpoint_save``); metrics, TensorBoard / W&B and
transcripts (``logbook``, ``log_backends``), plots (``plots``); the run's environment record
(``environment``), local-path checks (``paths``), durable JSON / JSONL writes (``jsonl``) and signals
(``preemption``).

Multi-host: process 0 writes every file here; the other processes read what it wrote after a barrier
(each module's docstring says what the other processes do).
"""
