"""Tests of webui/batch/asserts/."""
