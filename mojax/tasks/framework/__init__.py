"""The task framework: the ``Task`` interface and its plumbing (``base``), the registry of names and
import paths (``registry``), the data types (``types``), splits and loaders (``splits``, ``data``),
self-built vocabularies (``vocab``), goal-conditioned prompts (``goal``), extra rewards by import
path (``extra_rewards``), multi-answer parsing (``multi_answer``) and the reasoning judge (``judge``).
The built-in tasks are the modules beside this folder (``mojax.tasks.calculator``, ``toolrl``, ...);
a custom task subclasses ``mojax.tasks.Task`` the same way."""
