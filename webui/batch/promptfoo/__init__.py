"""promptfoo's suites: read (:mod:`.reader`, with its tests, options, providers and Nunjucks templates), checked in
promptfoo's dialect where it differs from ours (:mod:`.dialect`, an overlay on the kinds table: :mod:`.kinds`), and
written back (:mod:`.export`)."""
