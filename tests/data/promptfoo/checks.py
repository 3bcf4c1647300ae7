def get_assert(output, context):
    """promptfoo's python assert convention: (output, context) -> bool, score or {pass, score, reason}."""
    return {"pass": len(output) < 200, "score": 1.0, "reason": "short enough"}
