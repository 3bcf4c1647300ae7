"""Checks on one generated output: the assert kinds (:mod:`.kinds`), how an assert is written and checked
(:mod:`.assertion`), the checks by family, and the leaf :mod:`.types` they all share."""
