"""Tests of webui/batch/run/."""
