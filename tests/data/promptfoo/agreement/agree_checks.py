"""python asserts for the promptfoo agreement cases (cases.yaml): each is called by promptfoo 0.115 and by
us on the same output, as ``function(output, context)``."""


def get_assert(output, context):
    """A yes/no check: the output names Paris."""
    return "Paris" in output


def length_score(output, context):
    """A score: the share of 20 characters the output reaches (0 for an empty output)."""
    return min(len(output), 20) / 20


def graded(output, context):
    """A grading result: passes when the output is short, scored by how short."""
    return {"pass": len(output) <= 10, "score": 1 - min(len(output), 20) / 20, "reason": f"{len(output)} characters"}


def says_pass_text(output, context):
    """A string "true"/"false", which promptfoo reads as a bool."""
    return "true" if output.strip() else "false"


def uses_vars(output, context):
    """Reads the test's vars from the context, as promptfoo passes them."""
    return context["vars"]["expected"] in output
