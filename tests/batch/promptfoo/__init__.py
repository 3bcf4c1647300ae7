"""Tests of webui/batch/promptfoo/."""
