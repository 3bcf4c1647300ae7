"""Batch prompt testing: prompts x a grid of sampling settings x N samples, checked by asserts.

Three packages: :mod:`.asserts` (the assert kinds and their checks, over the leaf :mod:`.asserts.types`),
:mod:`.promptfoo` (promptfoo suites read, checked in promptfoo's dialect, and exported) and :mod:`.run` (prompts,
the grid, the runner, results, the response cache, re-runs, the judge, export, the CLI). The runs are stored by
webui/store/batch_runs.py. Every user mistake is a :class:`~webui.batch.asserts.errors.BatchInputError`, raised
before anything runs.
"""
