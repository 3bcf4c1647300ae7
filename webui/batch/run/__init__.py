"""Running batches: prompts (:mod:`.prompts`), the grid and its plan (:mod:`.grid`), the runner (:mod:`.runner`,
with tool-loop rows, the response cache, re-runs and the judge), results and summaries (:mod:`.results`), export and
import (:mod:`.export`) and ``launch.py batch`` (:mod:`.cli`)."""
